//! Exact offset mapping. MM2's syncs are points, so between two of them it can only promise
//! "one past the older sync", and a failed-over group re-reads up to `offset.lag.max` records per
//! partition. strait instead records *runs*: stretches of consecutive source offsets that landed
//! at consecutive target offsets. A run breaks only where the mapping does: an upstream gap
//! (transaction marker, compaction, a filtered or re-routed record), a downstream jump (a restart
//! that re-sends records) or a rewind. Inside a run translation is exact, both ways.
//!
//! Cost: one record per run break plus the open run riding on the position record that is
//! written anyway. A topic without transactions or filtering costs one run record per partition
//! per restart.

use std::collections::BTreeMap;

use crate::record::{SourceOffset, TargetOffset};

/// Consecutive source offsets `[upstream, upstream + len)` that landed at consecutive target
/// offsets `[downstream, downstream + len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// First source offset of the run.
    pub upstream: SourceOffset,
    /// Target offset of that record.
    pub downstream: TargetOffset,
    /// Records in the run (at least 1).
    pub len: i64,
}

impl Run {
    fn up_end(&self) -> SourceOffset {
        self.upstream.after(self.len)
    }

    fn down_end(&self) -> TargetOffset {
        self.downstream.after(self.len)
    }
}

/// The producer side: follows one partition's acknowledgements in order, extending the open run
/// or closing it.
#[derive(Debug, Clone, Default)]
pub struct RunTracker {
    open: Option<Run>,
}

impl RunTracker {
    /// Continues from the open run a previous lifetime stored, if any.
    pub fn resume(open: Option<Run>) -> Self {
        Self { open }
    }

    /// The record at source offset `upstream` landed at `downstream`. Returns the run this
    /// closed, which must be stored before the position that covers the new one.
    pub fn acked(&mut self, upstream: SourceOffset, downstream: TargetOffset) -> Option<Run> {
        match &mut self.open {
            Some(run) if run.up_end() == upstream && run.down_end() == downstream => {
                run.len += 1;
                None
            }
            _ => self.open.replace(Run { upstream, downstream, len: 1 }),
        }
    }

    /// The run still growing.
    pub fn open(&self) -> Option<Run> {
        self.open
    }
}

/// The reader side: every known run of one partition, and translation through them.
///
/// ```
/// use strait_core::offsets::{PartitionMap, Run, SourceOffset as S, TargetOffset as T};
/// let mut m = PartitionMap::default();
/// m.closed(Run { upstream: S(0), downstream: T(0), len: 100 });
/// m.open(Run { upstream: S(102), downstream: T(100), len: 50 }, S(152)); // 100-101: a transaction marker
/// assert_eq!(m.translate(S(40)), Some(T(40)));
/// assert_eq!(m.translate(S(101)), Some(T(100))); // the marker maps to the next record
/// assert_eq!(m.translate(S(120)), Some(T(118)));
/// assert_eq!(m.translate_back(T(118)), Some(S(120)));
/// ```
#[derive(Debug, Clone, Default)]
pub struct PartitionMap {
    /// Closed runs and the open one, by first source offset.
    runs: BTreeMap<SourceOffset, Run>,
    /// The next source offset replication will read (everything before it is done).
    next: Option<SourceOffset>,
}

impl PartitionMap {
    /// A closed run was stored.
    pub fn closed(&mut self, run: Run) {
        self.insert(run);
    }

    /// A position record: the open run and the next source offset to replicate.
    pub fn open(&mut self, run: Run, next: SourceOffset) {
        self.insert(run);
        self.next = Some(next);
    }

    /// A position record of a partition none of whose records was replicated yet.
    pub fn set_next(&mut self, next: SourceOffset) {
        self.next = Some(next);
    }

    /// A run record was deleted (its source records are gone).
    pub fn forget(&mut self, upstream: SourceOffset) {
        self.runs.remove(&upstream);
    }

    /// The next source offset replication will read, as last stored.
    pub fn next(&self) -> Option<SourceOffset> {
        self.next
    }

    /// Every run, oldest first.
    pub fn runs(&self) -> impl Iterator<Item = &Run> {
        self.runs.values()
    }

    fn insert(&mut self, run: Run) {
        // Runs at or after this one's start describe an earlier copy (a restart re-sent them)
        // or a source that was rewound: this run supersedes them.
        let _ = self.runs.split_off(&run.upstream);
        // A target that went back (remote topic recreated) makes every older run point at
        // records that are gone.
        if self.runs.values().next_back().is_some_and(|last| last.down_end() > run.downstream) {
            self.runs.clear();
        }
        self.runs.insert(run.upstream, run);
    }

    /// The closed runs no translation needs any more, by first source offset: what a pruning
    /// round may delete. `log_start` is the source partition's log start offset; `needed_from`
    /// the lowest source offset a group still has to be translated exactly from (`None` when
    /// not every group could be read, or none committed on the partition).
    ///
    /// [`PartitionMap::translate`] of an offset uses the last run starting at or before it, so a
    /// run is dead once a later run starts at or before the bound: nothing at or after the bound
    /// reaches it. Runs past the stored position are never deleted (a restart may re-send them),
    /// nor is the newest. Below `needed_from` the oldest run still readable stays as a floor: a
    /// group that turns up later at an older offset translates through it to an earlier target
    /// offset, re-reading some records (as MM2 does between its syncs) instead of getting no
    /// translation at all.
    ///
    /// ```
    /// use strait_core::offsets::{PartitionMap, Run, SourceOffset as S, TargetOffset as T};
    /// let mut m = PartitionMap::default();
    /// for i in 0..5 {
    ///     m.closed(Run { upstream: S(i * 10), downstream: T(i * 9), len: 9 }); // a marker every 10
    /// }
    /// m.open(Run { upstream: S(50), downstream: T(45), len: 9 }, S(59));
    /// assert_eq!(m.obsolete(Some(S(20)), None), vec![S(0), S(10)], "source records before 20 are gone");
    /// assert_eq!(m.obsolete(Some(S(0)), Some(S(45))), vec![S(10), S(20), S(30)], "0 stays as the floor");
    /// ```
    pub fn obsolete(&self, log_start: Option<SourceOffset>, needed_from: Option<SourceOffset>) -> Vec<SourceOffset> {
        let Some(done) = self.next else { return Vec::new() };
        let gone_before = log_start.map_or(SourceOffset(i64::MIN), |s| s.min(done));
        let needed = needed_from.map_or(SourceOffset(i64::MIN), |n| n.min(done));
        let mut floor_kept = false;
        let mut out = Vec::new();
        let runs: Vec<&Run> = self.runs.values().collect();
        for pair in runs.windows(2) {
            let (run, later) = (pair[0], pair[1]);
            if later.upstream <= gone_before {
                out.push(run.upstream);
            } else if !floor_kept {
                floor_kept = true;
            } else if later.upstream <= needed {
                out.push(run.upstream);
            }
        }
        out
    }

    /// The target offset a group whose next source offset is `upstream` resumes at: exact
    /// inside a run; past a run's end (a gap, or records not yet replicated) the target offset
    /// of the next replicated record. `None` before the first known run.
    pub fn translate(&self, upstream: SourceOffset) -> Option<TargetOffset> {
        let (_, run) = self.runs.range(..=upstream).next_back()?;
        Some(if upstream < run.up_end() { run.downstream.after(upstream.since(run.upstream)) } else { run.down_end() })
    }

    /// Where the record at source offset `upstream` landed, when a run covers it: no guess
    /// across a gap (what `strait verify` checks each record against).
    ///
    /// ```
    /// use strait_core::offsets::{PartitionMap, Run, SourceOffset as S, TargetOffset as T};
    /// let mut m = PartitionMap::default();
    /// m.open(Run { upstream: S(10), downstream: T(0), len: 5 }, S(15));
    /// assert_eq!(m.place(S(12)), Some(T(2)));
    /// assert_eq!(m.place(S(15)), None, "past the run");
    /// ```
    pub fn place(&self, upstream: SourceOffset) -> Option<TargetOffset> {
        let (_, run) = self.runs.range(..=upstream).next_back()?;
        (upstream < run.up_end()).then(|| run.downstream.after(upstream.since(run.upstream)))
    }

    /// The way back: the source offset a group whose next target offset is `downstream`
    /// resumes at on the source (failback). Past a run's end it is the first source offset the
    /// run did not cover, so nothing the group has not seen is skipped.
    pub fn translate_back(&self, downstream: TargetOffset) -> Option<SourceOffset> {
        let run = self.runs.values().rev().find(|r| r.downstream <= downstream)?;
        Some(if downstream < run.down_end() {
            run.upstream.after(downstream.since(run.downstream))
        } else {
            run.up_end()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(upstream: i64, downstream: i64, len: i64) -> Run {
        Run { upstream: SourceOffset(upstream), downstream: TargetOffset(downstream), len }
    }

    fn up(offsets: impl IntoIterator<Item = i64>) -> Vec<SourceOffset> {
        offsets.into_iter().map(SourceOffset).collect()
    }

    #[test]
    fn tracker_breaks_only_where_the_mapping_does() {
        let mut t = RunTracker::default();
        assert_eq!(t.acked(SourceOffset(10), TargetOffset(0)), None);
        for o in 11..20 {
            assert_eq!(t.acked(SourceOffset(o), TargetOffset(o - 10)), None);
        }
        assert_eq!(
            t.acked(SourceOffset(22), TargetOffset(10)),
            Some(run(10, 0, 10)),
            "upstream gap (marker or filtered)"
        );
        assert_eq!(
            t.acked(SourceOffset(23), TargetOffset(50)),
            Some(run(22, 10, 1)),
            "downstream jump (re-sent after a restart)"
        );
        assert_eq!(t.open(), Some(run(23, 50, 1)));
        let mut resumed = RunTracker::resume(Some(run(23, 50, 1)));
        assert_eq!(
            resumed.acked(SourceOffset(24), TargetOffset(51)),
            None,
            "a restart that continues exactly keeps the run"
        );
    }

    #[test]
    fn translation_is_exact_inside_runs_and_never_skips_outside() {
        let mut m = PartitionMap::default();
        assert_eq!(m.translate(SourceOffset(0)), None);
        m.closed(run(5, 0, 10)); // 5..15 -> 0..10
        m.closed(run(17, 10, 3)); // 15,16 markers; 17..20 -> 10..13
        m.open(run(25, 13, 5), SourceOffset(32)); // 20..25 filtered; 25..30 -> 13..18; 30,31 filtered
        assert_eq!(m.translate(SourceOffset(4)), None, "before anything replicated");
        assert_eq!(m.translate(SourceOffset(5)), Some(TargetOffset(0)));
        assert_eq!(m.translate(SourceOffset(14)), Some(TargetOffset(9)));
        assert_eq!(m.translate(SourceOffset(15)), Some(TargetOffset(10)));
        assert_eq!(m.translate(SourceOffset(16)), Some(TargetOffset(10)));
        assert_eq!(m.translate(SourceOffset(22)), Some(TargetOffset(13)));
        assert_eq!(m.translate(SourceOffset(29)), Some(TargetOffset(17)));
        assert_eq!(m.translate(SourceOffset(31)), Some(TargetOffset(18)));
        assert_eq!(
            m.translate(SourceOffset(1000)),
            Some(TargetOffset(18)),
            "not replicated yet: where the next record lands"
        );
        assert_eq!(m.next(), Some(SourceOffset(32)));
        for (down, up) in [(0, 5), (9, 14), (10, 17), (12, 19), (13, 25), (17, 29), (18, 30)] {
            assert_eq!(m.translate_back(TargetOffset(down)), Some(SourceOffset(up)), "back from {down}");
        }
    }

    #[test]
    fn a_zero_length_anchor_maps_a_partitions_start_before_any_record_and_gives_way_to_real_runs() {
        // A partition first seen empty (or read from its end at 40), its remote partition at 7.
        let anchor = run(40, 7, 0);
        let mut m = PartitionMap::default();
        m.open(anchor, SourceOffset(40));
        assert_eq!(
            m.translate(SourceOffset(40)),
            Some(TargetOffset(7)),
            "a group at the start resumes where the first record will land"
        );
        assert_eq!(m.translate(SourceOffset(39)), None, "before the start nothing is known");
        assert_eq!(m.translate_back(TargetOffset(7)), Some(SourceOffset(40)));

        // The first record lands where the anchor said: the run simply grows.
        let mut exact = RunTracker::resume(Some(anchor));
        assert_eq!(exact.acked(SourceOffset(40), TargetOffset(7)), None);
        assert_eq!(exact.open(), Some(run(40, 7, 1)));

        // It lands later (retention moved the start, or another writer wrote to the target): the
        // anchor closes and stays, and nothing is forgotten or skipped.
        let mut later = RunTracker::resume(Some(anchor));
        assert_eq!(later.acked(SourceOffset(43), TargetOffset(9)), Some(anchor));
        m.closed(anchor);
        m.open(run(43, 9, 5), SourceOffset(48));
        assert_eq!(
            m.translate(SourceOffset(40)),
            Some(TargetOffset(7)),
            "re-reads the foreign records rather than skip"
        );
        assert_eq!(
            m.translate(SourceOffset(42)),
            Some(TargetOffset(7)),
            "in the gap: the same, never past the first record"
        );
        assert_eq!(m.translate(SourceOffset(43)), Some(TargetOffset(9)));
        assert_eq!(m.translate(SourceOffset(45)), Some(TargetOffset(11)));
    }

    #[test]
    fn pruning_keeps_what_the_log_start_and_the_oldest_group_still_reach() {
        let mut m = PartitionMap::default();
        m.closed(run(40, 7, 0)); // an anchor: the partition was first seen at 40
        m.closed(run(43, 9, 5)); // 48, 49: a marker
        m.closed(run(50, 14, 10));
        m.closed(run(62, 24, 10));
        m.open(run(74, 34, 6), SourceOffset(80));
        assert_eq!(
            m.obsolete(Some(SourceOffset(40)), None),
            Vec::<SourceOffset>::new(),
            "a group at 40 still resumes at 7"
        );
        assert_eq!(m.obsolete(Some(SourceOffset(43)), None), up([40]));
        assert_eq!(m.obsolete(Some(SourceOffset(49)), None), up([40]), "a group at 49 resumes through the run at 43");
        assert_eq!(
            m.obsolete(Some(SourceOffset(1000)), Some(SourceOffset(1000))),
            up([40, 43, 50, 62]),
            "all but the open run, bounded by the position"
        );
        assert_eq!(m.obsolete(None, Some(SourceOffset(65))), up([43, 50]), "the anchor stays as the floor");
        let mut pruned = m.clone();
        for upstream in pruned.obsolete(None, Some(SourceOffset(65))) {
            pruned.forget(upstream);
        }
        assert_eq!(pruned.translate(SourceOffset(65)), m.translate(SourceOffset(65)));
        assert_eq!(
            pruned.translate(SourceOffset(55)),
            Some(TargetOffset(7)),
            "behind the bound: re-reads from the floor, never skips"
        );
        let mut unread = PartitionMap::default();
        unread.closed(run(0, 0, 5));
        unread.closed(run(6, 5, 5));
        assert_eq!(
            unread.obsolete(Some(SourceOffset(100)), Some(SourceOffset(100))),
            Vec::<SourceOffset>::new(),
            "no stored position: nothing is known done"
        );
    }

    proptest::proptest! {
        /// Whatever the runs and bounds, deleting what `obsolete` names changes no translation
        /// at or after both bounds, and elsewhere only ever moves it earlier (re-read, never
        /// skip); what stays is the floor and the runs the bounds still reach.
        #[test]
        fn pruning_never_skips_and_stays_exact_where_needed(
            shape in proptest::collection::vec((0i64..3, 0i64..3, 0i64..6), 1..12),
            tail in 0i64..3,
            log_start in 0i64..80,
            needed in proptest::option::of(0i64..80),
        ) {
            let mut m = PartitionMap::default();
            let (mut up, mut down) = (0, 0);
            let mut runs = Vec::new();
            for (gap_up, gap_down, len) in shape {
                up += gap_up;
                down += gap_down;
                runs.push(run(up, down, len));
                up += len;
                down += len;
            }
            let open = runs.pop().unwrap_or(run(0, 0, 0));
            for r in runs {
                m.closed(r);
            }
            m.open(open, open.up_end().after(tail));
            let dead = m.obsolete(Some(SourceOffset(log_start)), needed.map(SourceOffset));
            let mut pruned = m.clone();
            for upstream in &dead {
                pruned.forget(*upstream);
            }
            let newest = m.runs().last().map(|r| r.upstream);
            proptest::prop_assert!(!dead.iter().any(|u| Some(*u) == newest), "the newest run stays");
            let exact_from = log_start.max(needed.unwrap_or(i64::MAX));
            for x in log_start..open.up_end().get() + tail + 5 {
                let (before, after) = (m.translate(SourceOffset(x)), pruned.translate(SourceOffset(x)));
                if x >= exact_from {
                    proptest::prop_assert_eq!(before, after, "exact at {}", x);
                }
                if let Some(b) = before {
                    proptest::prop_assert!(after.is_some_and(|a| a <= b), "{} translated to {:?}, was {}", x, after, b);
                }
            }
            for d in 0..open.down_end().get() + 5 {
                if let (Some(b), Some(a)) = (m.translate_back(TargetOffset(d)), pruned.translate_back(TargetOffset(d))) {
                    proptest::prop_assert!(a <= b, "back from {}: {} after pruning, {} before", d, a, b);
                }
            }
            if let Some(n) = needed {
                let reached = m.runs().collect::<Vec<_>>().windows(2).filter(|w| w[1].upstream.get() > n.min(open.up_end().get() + tail)).count();
                proptest::prop_assert!(pruned.runs().count() <= reached + 2, "{} runs kept", pruned.runs().count());
            }
        }
    }

    #[test]
    fn re_sent_runs_supersede_and_target_rewinds_forget() {
        let mut m = PartitionMap::default();
        m.closed(run(0, 0, 100));
        m.closed(run(100, 100, 50));
        // A crash after 150 records were written but only 100 stored: the restart re-sends
        // 100.. at 150.
        m.open(run(100, 150, 60), SourceOffset(160));
        assert_eq!(m.translate(SourceOffset(120)), Some(TargetOffset(170)));
        assert_eq!(m.translate(SourceOffset(50)), Some(TargetOffset(50)));
        // The remote topic was recreated.
        m.closed(run(160, 0, 10));
        assert_eq!(m.translate(SourceOffset(50)), None);
        assert_eq!(m.translate(SourceOffset(165)), Some(TargetOffset(5)));
    }
}
