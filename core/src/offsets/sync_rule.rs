//! MM2's rule for when a replicated record gets an offset sync (`offset.lag.max`), kept so the
//! syncs strait writes in MM2's layout are the ones MM2 itself would have written.

use crate::record::{SourceOffset, TargetOffset};

/// MM2's rule for when to emit an offset sync for one partition (`OffsetSyncWriter`).
#[derive(Debug, Clone)]
pub struct SyncRule {
    max_lag: i64,
    last_synced_downstream: Option<TargetOffset>,
    previous: Option<(SourceOffset, TargetOffset)>,
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
    pub fn update(&mut self, upstream: SourceOffset, downstream: TargetOffset) -> bool {
        let emit = match (self.last_synced_downstream, self.previous) {
            (None, _) | (_, None) => true,
            (Some(last), Some((prev_up, prev_down))) => {
                downstream.since(last.next()) >= self.max_lag || upstream.since(prev_up) != 1 || downstream < prev_down
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

    #[test]
    fn sync_rule_follows_mm2() {
        let mut r = SyncRule::new(100);
        assert!(r.update(SourceOffset(0), TargetOffset(0)), "first record of the lifetime");
        assert!(!r.update(SourceOffset(1), TargetOffset(1)));
        assert!(r.update(SourceOffset(3), TargetOffset(2)), "upstream skipped 2 (a transaction marker)");
        for up in 4..102 {
            assert!(!r.update(SourceOffset(up), TargetOffset(up - 1)), "{up}");
        }
        assert!(r.update(SourceOffset(103), TargetOffset(102)), "100 behind the last sync");
        assert!(r.update(SourceOffset(104), TargetOffset(50)), "downstream went back");
    }
}
