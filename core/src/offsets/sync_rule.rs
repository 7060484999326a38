//! MM2's rule for when a replicated record gets an offset sync (`offset.lag.max`), kept so the
//! syncs strait writes in MM2's layout are the ones MM2 itself would have written.

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
