//! When a checkpoint may be written: only from a translation that already reflects every record
//! the target acknowledged up to the group's committed offset.
//!
//! The stored mapping lags what the target acknowledged by up to one position flush (or one
//! transaction). A group committed past the stored position translates to where the next
//! replicated record lands, which is exact only if nothing past the stored position reached the
//! target yet: otherwise those records were acknowledged, sit on the target below that offset,
//! and a group failed over there would read them again. The target partition's end, read after
//! the group's committed offset, tells the two apart: a stored mapping that reaches it misses
//! nothing the target held when the commit was read.

use super::runs::PartitionMap;
use crate::record::{SourceOffset, TargetOffset};

/// A remote partition's log start and end offsets on the target, read after the group's
/// committed offsets were (`read_committed`, so an exactly-once flow's open transaction is not
/// counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetExtent {
    /// The oldest offset still readable.
    pub start: TargetOffset,
    /// The offset the next record will get.
    pub end: TargetOffset,
    /// The flow commits its positions in the same transaction as the records they cover
    /// (exactly-once): nothing on the target can be missing from the stored mapping, and the
    /// end counts the flow's own commit markers, which no run covers.
    pub stored_with_records: bool,
}

impl TargetExtent {
    /// Whether the target may hold records of this flow past `mapped` that its stored
    /// positions do not cover yet.
    fn beyond(&self, mapped: TargetOffset) -> bool {
        !self.stored_with_records && self.end > mapped
    }
}

/// What the stored mapping says of a group's committed offset: where it resumes on the other
/// cluster (`O`: a [`TargetOffset`] forward, a [`SourceOffset`] on the way back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled<O> {
    /// The group resumes here on the target: nothing the target held when the commit was read
    /// is missing from the translation.
    Exact(O),
    /// The group is ahead of replication: source records before its committed offset are not
    /// on the target yet, and it resumes where the next of them will land. Exact for what the
    /// target holds, but the flow is likely to catch up within moments: worth waiting for.
    /// On the way back: the group read records on the flow's target past the stored mapping.
    Ahead(O),
    /// The target holds records the stored mapping does not cover yet, some of which may be
    /// below the committed offset, or none of the partition's records was replicated yet while
    /// the group already read some: wait for the next stored positions.
    Pending,
    /// The committed offset is older than every run the mapping still has.
    Unknown,
}

impl PartitionMap {
    /// Translates `committed` (a group's next source offset) only when that translation
    /// reflects every record the target held at `target`: see the module's documentation.
    pub fn settled(&self, committed: SourceOffset, target: TargetExtent) -> Settled<TargetOffset> {
        let last_end = self.runs().last().map(|run| run.downstream.after(run.len));
        let covered = self.next().is_some_and(|next| committed <= next);
        match (covered, last_end) {
            // Every source record before the committed offset is stored as replicated or
            // skipped: inside a run the translation is exact, past one it is where this
            // flow's next record lands, wherever later records went.
            (true, Some(_)) => self.translate(committed).map_or(Settled::Unknown, Settled::Exact),
            // Past the stored position, with nothing beyond the mapping on the target.
            (false, Some(end)) if !target.beyond(end) => Settled::Ahead(end),
            // No run stored and every record before the commit skipped: where this flow's first
            // record lands is known only while the remote partition holds nothing of it.
            (true, None) if !target.beyond(target.start) => Settled::Exact(target.end),
            // The rest: records on the target the mapping does not cover, or a group that read
            // records of a partition the flow has replicated nothing of yet (a flow that just
            // started): a translation now would send the group back to the start.
            _ => Settled::Pending,
        }
    }

    /// The way back (failback): where a group whose next offset on this flow's *target* is
    /// `committed` resumes on the source. Exact while the stored mapping reaches the commit;
    /// past it, the group read records the flow acknowledged but has not stored yet (or that
    /// another writer put there), and it gets the first source offset the mapping does not
    /// cover: [`Settled::Ahead`].
    pub fn settled_back(&self, committed: TargetOffset) -> Settled<SourceOffset> {
        let Some(last) = self.runs().last() else { return Settled::Unknown };
        match self.translate_back(committed) {
            None => Settled::Unknown,
            Some(source) if committed <= last.downstream.after(last.len) => Settled::Exact(source),
            Some(source) => Settled::Ahead(source),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::offsets::{Run, RunTracker};

    fn extent(start: i64, end: i64) -> TargetExtent {
        TargetExtent { start: TargetOffset(start), end: TargetOffset(end), stored_with_records: false }
    }

    #[test]
    fn a_commit_past_the_stored_position_waits_while_the_target_holds_more_than_the_mapping() {
        let mut m = PartitionMap::default();
        m.set_next(SourceOffset(0));
        // Ten records replicated and acknowledged, none stored yet: the first checkpoint round
        // of a flow that just started.
        assert_eq!(m.settled(SourceOffset(10), extent(0, 10)), Settled::Pending);
        m.open(Run { upstream: SourceOffset(0), downstream: TargetOffset(0), len: 10 }, SourceOffset(10));
        assert_eq!(m.settled(SourceOffset(10), extent(0, 10)), Settled::Exact(TargetOffset(10)));
        assert_eq!(m.settled(SourceOffset(4), extent(0, 10)), Settled::Exact(TargetOffset(4)));
        // The group ran ahead of replication: nothing beyond the mapping on the target.
        assert_eq!(m.settled(SourceOffset(15), extent(0, 10)), Settled::Ahead(TargetOffset(10)));
        // Acknowledged past the stored position.
        assert_eq!(m.settled(SourceOffset(15), extent(0, 13)), Settled::Pending);
        // A commit inside the stored mapping does not care what came after it.
        assert_eq!(m.settled(SourceOffset(10), extent(0, 13)), Settled::Exact(TargetOffset(10)));
    }

    #[test]
    fn an_empty_partition_translates_to_the_end_of_an_empty_remote_partition() {
        let mut m = PartitionMap::default();
        m.set_next(SourceOffset(0));
        assert_eq!(m.settled(SourceOffset(0), extent(0, 0)), Settled::Exact(TargetOffset(0)));
        assert_eq!(
            m.settled(SourceOffset(10), extent(0, 0)),
            Settled::Pending,
            "the group read records the flow has not replicated yet: not 0"
        );
        assert_eq!(m.settled(SourceOffset(0), extent(7, 7)), Settled::Exact(TargetOffset(7)), "emptied by retention");
        assert_eq!(m.settled(SourceOffset(0), extent(0, 3)), Settled::Pending, "records nobody mapped yet");
    }

    #[test]
    fn exactly_once_positions_cover_everything_committed_on_the_target_but_its_markers() {
        let mut m = PartitionMap::default();
        m.set_next(SourceOffset(0));
        let committed_with_markers =
            |start, end| TargetExtent { start: TargetOffset(start), end: TargetOffset(end), stored_with_records: true };
        assert_eq!(
            m.settled(SourceOffset(10), committed_with_markers(0, 1)),
            Settled::Pending,
            "nothing replicated yet"
        );
        assert_eq!(m.settled(SourceOffset(0), committed_with_markers(0, 1)), Settled::Exact(TargetOffset(1)));
        m.open(Run { upstream: SourceOffset(0), downstream: TargetOffset(0), len: 10 }, SourceOffset(10));
        // 10 records and the commit marker at 10: the source ends with a marker of its own at 10.
        assert_eq!(m.settled(SourceOffset(11), committed_with_markers(0, 11)), Settled::Ahead(TargetOffset(10)));
    }

    #[test]
    fn the_way_back_is_exact_only_as_far_as_the_stored_mapping_reaches() {
        let mut m = PartitionMap::default();
        // A partition seen for the first time is anchored by an empty run before any record.
        m.open(Run { upstream: SourceOffset(0), downstream: TargetOffset(0), len: 0 }, SourceOffset(0));
        assert_eq!(m.settled_back(TargetOffset(0)), Settled::Exact(SourceOffset(0)));
        assert_eq!(
            m.settled_back(TargetOffset(66)),
            Settled::Ahead(SourceOffset(0)),
            "the group read 66 records on the target that the stored mapping does not reach yet"
        );
        m.open(Run { upstream: SourceOffset(0), downstream: TargetOffset(0), len: 66 }, SourceOffset(66));
        assert_eq!(m.settled_back(TargetOffset(66)), Settled::Exact(SourceOffset(66)));
        assert_eq!(m.settled_back(TargetOffset(17)), Settled::Exact(SourceOffset(17)));
        assert_eq!(PartitionMap::default().settled_back(TargetOffset(3)), Settled::Unknown);
    }

    #[test]
    fn a_commit_older_than_every_run_is_unknown() {
        let mut m = PartitionMap::default();
        m.open(Run { upstream: SourceOffset(50), downstream: TargetOffset(0), len: 5 }, SourceOffset(55));
        assert_eq!(m.settled(SourceOffset(20), extent(0, 5)), Settled::Unknown);
    }

    /// One step of a replication history.
    #[derive(Debug, Clone, Copy)]
    enum Step {
        /// The next source record is handled: acknowledged by the target, or filtered out.
        Handle,
        /// The produce side stores its closed runs and its position.
        Store,
        /// A checkpoint round: a group committed at `committed` (a fraction of the source, in
        /// percent) is read, then the target's extent; `store_between` stores the positions
        /// between reading the extent and translating (the round waited for them).
        Round { committed: u8, store_between: bool },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => Just(Step::Handle),
            1 => Just(Step::Store),
            2 => (0u8..=100, any::<bool>()).prop_map(|(committed, store_between)| Step::Round { committed, store_between }),
        ]
    }

    /// The produce side of one partition and what it stored.
    struct History {
        /// Per source offset: whether the record is replicated (else filtered out).
        replicated: Vec<bool>,
        /// Records on the remote partition before the flow wrote any.
        before: i64,
        /// Source records handled so far.
        handled: usize,
        tracker: RunTracker,
        closed: Vec<Run>,
        stored: PartitionMap,
    }

    impl History {
        fn acknowledged(&self) -> i64 {
            self.replicated[..self.handled].iter().filter(|r| **r).count() as i64
        }

        fn handle(&mut self) {
            if self.handled == self.replicated.len() {
                return;
            }
            if self.replicated[self.handled] {
                let at = TargetOffset(self.before + self.acknowledged());
                self.closed.extend(self.tracker.acked(SourceOffset(self.handled as i64), at));
            }
            self.handled += 1;
        }

        fn store(&mut self) {
            for run in self.closed.drain(..) {
                self.stored.closed(run);
            }
            let next = SourceOffset(self.handled as i64);
            match self.tracker.open() {
                Some(run) => self.stored.open(run, next),
                None => self.stored.set_next(next),
            }
        }

        /// Where a group whose next source offset is `committed` must resume: before the target
        /// offset of the first replicated record at or after it.
        fn exact(&self, committed: usize) -> TargetOffset {
            TargetOffset(self.before + self.replicated[..committed].iter().filter(|r| **r).count() as i64)
        }
    }

    proptest! {
        /// For any history of acknowledgements, stores and checkpoint rounds: a translation the
        /// rule lets through is never above the exact offset, and never below it once the
        /// records up to the committed offset were acknowledged when the round read the
        /// target; and a round that waits for one store after reading the target is settled.
        #[test]
        fn a_settled_translation_is_exact_once_the_records_were_acknowledged_and_never_above(
            replicated in proptest::collection::vec(prop::bool::weighted(0.8), 1..40),
            before in 0i64..3,
            emptied in any::<bool>(),
            stored_with_records in any::<bool>(),
            steps in proptest::collection::vec(step(), 1..80),
        ) {
            let mut h = History {
                replicated, before, handled: 0, tracker: RunTracker::default(), closed: Vec::new(),
                stored: PartitionMap::default(),
            };
            // The flow stores a position for every partition it is assigned, before any record.
            h.store();
            let start = TargetOffset(if emptied { before } else { 0 });
            for step in steps {
                match step {
                    // Exactly-once: a record is on the target only with the position covering it.
                    Step::Handle if stored_with_records => {
                        h.handle();
                        h.store();
                    }
                    Step::Handle => h.handle(),
                    Step::Store => h.store(),
                    Step::Round { committed, store_between } => {
                        let committed = h.replicated.len() * committed as usize / 100;
                        let handled_when_read = h.handled;
                        let end = TargetOffset(h.before + h.acknowledged());
                        let target = TargetExtent { start, end, stored_with_records };
                        if store_between {
                            h.store();
                        }
                        let exact = h.exact(committed);
                        match h.stored.settled(SourceOffset(committed as i64), target) {
                            Settled::Exact(t) | Settled::Ahead(t) => {
                                prop_assert!(t <= exact, "{:?} above the exact {:?} for {}", t, exact, committed);
                                if handled_when_read >= committed {
                                    prop_assert_eq!(t, exact, "below exact for {} though acknowledged", committed);
                                }
                            }
                            Settled::Pending => {
                                // After a store only a partition with no run yet stays pending:
                                // records nobody mapped on the target, or a group ahead of it.
                                let unmapped = h.stored.runs().next().is_none()
                                    && ((!emptied && h.before > 0 && !stored_with_records) || h.handled < committed);
                                prop_assert!(!store_between || unmapped, "still pending after a store");
                            }
                            Settled::Unknown => {
                                let first = h.stored.runs().next().map(|r| r.upstream);
                                prop_assert!(first.is_some_and(|f| SourceOffset(committed as i64) < f));
                            }
                        }
                    }
                }
            }
        }
    }
}
