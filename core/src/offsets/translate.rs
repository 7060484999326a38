//! Offset translation with MM2's guarantee: a translated offset never points past the record
//! the group would read next, so a failed-over group re-reads at most a few records and never
//! skips one.
//!
//! Per source partition a short history of offset syncs is kept, spaced exponentially back from
//! the newest, so groups far behind the latest sync still translate.

use std::collections::HashMap;

use super::mm2::OffsetSync;

/// How many syncs each partition remembers (MM2 keeps 64).
const HISTORY: usize = 64;

/// The sync history of one partition, newest first.
#[derive(Debug, Default, Clone)]
struct History {
    syncs: Vec<OffsetSync>,
}

impl History {
    fn add(&mut self, sync: OffsetSync) {
        match self.syncs.first() {
            // A rewind upstream (topic recreated, group reset) or downstream (remote truncated)
            // makes every older sync meaningless.
            Some(newest) if sync.upstream < newest.upstream || sync.downstream < newest.downstream => {
                self.syncs.clear()
            }
            Some(newest) if *newest == sync => return,
            _ => {}
        }
        self.syncs.insert(0, sync);
        // Keep entry k only if it is at least 2^(k-1) upstream offsets older than the newest:
        // dense near the head, sparse far back, bounded in length. The oldest sync always
        // stays, so every group at or past it still translates.
        let newest = sync.upstream;
        let all: Vec<OffsetSync> = self.syncs.drain(..).collect();
        let oldest = all[all.len() - 1];
        let mut kept: Vec<OffsetSync> = Vec::with_capacity(all.len().min(HISTORY));
        for s in all {
            let k = kept.len();
            if k == HISTORY - 1 {
                break;
            }
            if k == 0 || newest - s.upstream >= 1i64 << (k - 1).min(62) {
                kept.push(s);
            }
        }
        if kept.last() != Some(&oldest) {
            kept.push(oldest);
        }
        self.syncs = kept;
    }

    fn translate(&self, upstream: i64) -> Option<i64> {
        let sync = self.syncs.iter().find(|s| s.upstream <= upstream)?;
        // Past the sync, only one step can be promised: the records between the sync and the
        // group's position may have been filtered or compacted away.
        Some(sync.downstream + i64::from(upstream != sync.upstream))
    }
}

/// Offset syncs of every partition a flow replicates, and translation through them.
///
/// ```
/// use strait_core::offsets::{mm2::OffsetSync, Translator};
/// let mut t = Translator::default();
/// t.add("orders", 0, OffsetSync { upstream: 100, downstream: 200 });
/// assert_eq!(t.translate("orders", 0, 150), Some(201));
/// ```
#[derive(Debug, Default, Clone)]
pub struct Translator {
    partitions: HashMap<(String, i32), History>,
}

impl Translator {
    /// Records an offset sync of a source partition.
    pub fn add(&mut self, topic: &str, partition: i32, sync: OffsetSync) {
        self.partitions.entry((topic.to_string(), partition)).or_default().add(sync);
    }

    /// Every source partition with at least one sync.
    pub fn partitions(&self) -> impl Iterator<Item = &(String, i32)> {
        self.partitions.keys()
    }

    /// The downstream offset a group at `upstream` can resume from, or `None` when no sync is
    /// old enough to translate it without risking a skip.
    pub fn translate(&self, topic: &str, partition: i32, upstream: i64) -> Option<i64> {
        self.partitions.get(&(topic.to_string(), partition))?.translate(upstream)
    }
}

/// MM2's rule for when to emit an offset sync for one partition (`OffsetSyncWriter`).
#[derive(Debug, Clone)]
pub struct SyncRule {
    max_lag: i64,
    last_synced_downstream: Option<i64>,
    previous: Option<(i64, i64)>,
}

impl SyncRule {
    /// `offset.lag.max` (MM2's default is 100).
    pub fn new(max_lag: i64) -> Self {
        Self { max_lag, last_synced_downstream: None, previous: None }
    }

    /// The record at `upstream` landed at `downstream`: whether to emit a sync for it. True on
    /// the first record of this lifetime, when upstream offsets skip (transaction markers,
    /// compaction), when the downstream offset goes back, and when translation through the last
    /// sync would lag `max_lag` or more behind.
    pub fn update(&mut self, upstream: i64, downstream: i64) -> bool {
        let emit = match (self.last_synced_downstream, self.previous) {
            (None, _) | (_, None) => true,
            (Some(last), Some((prev_up, prev_down))) => {
                downstream - (last + 1) >= self.max_lag || upstream - prev_up != 1 || downstream < prev_down
            }
        };
        if emit {
            self.last_synced_downstream = Some(downstream);
        }
        self.previous = Some((upstream, downstream));
        emit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sync(upstream: i64, downstream: i64) -> OffsetSync {
        OffsetSync { upstream, downstream }
    }

    #[test]
    fn mm2_published_cases() {
        let mut t = Translator::default();
        t.add("t", 0, sync(100, 200));
        assert_eq!(t.translate("t", 0, 150), Some(201));
        t.add("t", 0, sync(150, 251));
        assert_eq!(t.translate("t", 0, 150), Some(251));
        assert_eq!(t.translate("t", 0, 5), None);
        t.add("t", 0, sync(200, 10));
        assert_eq!(t.translate("t", 0, 200), Some(10));
        t.add("t", 0, sync(20, 20));
        assert_eq!(t.translate("t", 0, 20), Some(20));
    }

    #[test]
    fn groups_far_behind_still_translate_and_never_past_their_position() {
        let mut t = Translator::default();
        // A sync every 100 records, downstream shifted by 1000.
        for up in (0..100_000).step_by(100) {
            t.add("t", 0, sync(up, up + 1000));
        }
        let history = t.partitions[&("t".to_string(), 0)].syncs.len();
        assert!(history <= HISTORY, "history holds {history}");
        for group in [0, 1, 99, 150, 5_000, 50_123, 99_950] {
            let got = t.translate("t", 0, group).expect("translates");
            assert!(got <= group + 1000, "group at {group} translated past its position to {got}");
            assert!(got >= 1000, "{got}");
        }
        assert_eq!(t.translate("t", 0, 99_900), Some(100_900));
        assert_eq!(t.translate("t", 1, 5), None, "unknown partition");
    }

    #[test]
    fn sync_rule_follows_mm2() {
        let mut r = SyncRule::new(100);
        assert!(r.update(0, 0), "first record of the lifetime");
        assert!(!r.update(1, 1));
        assert!(r.update(3, 2), "upstream skipped 2 (a transaction marker)");
        for up in 4..102 {
            assert!(!r.update(up, up - 1), "{up}");
        }
        assert!(r.update(103, 102), "100 behind the last sync");
        assert!(r.update(104, 50), "downstream went back");
    }
}
