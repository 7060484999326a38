//! Which source offsets are safe to resume from: per partition, the end of the contiguous prefix
//! of records the target acknowledged (or that the policy dropped).

use std::collections::VecDeque;

use crate::record::{SlotId, SourceOffset};
use crate::slot_vec::SlotVec;

#[derive(Debug, Default)]
struct PartitionProgress {
    /// Offsets handed to the producer or dropped, in source order, with whether they are done.
    pending: VecDeque<(SourceOffset, bool)>,
    /// The next source offset to fetch after a restart.
    position: Option<SourceOffset>,
    dirty: bool,
}

impl PartitionProgress {
    fn advance(&mut self) {
        while let Some(&(offset, true)) = self.pending.front() {
            self.pending.pop_front();
            self.position = Some(offset.next());
            self.dirty = true;
        }
    }
}

/// Acked-prefix tracking for every partition of a flow.
///
/// ```
/// use strait_core::offsets::{Progress, SourceOffset};
/// let mut p = Progress::default();
/// p.sent(0, SourceOffset(10));
/// p.sent(0, SourceOffset(11));
/// p.acked(0, SourceOffset(11));
/// assert_eq!(p.position(0), None); // 10 is not acknowledged yet
/// p.acked(0, SourceOffset(10));
/// assert_eq!(p.position(0), Some(SourceOffset(12)));
/// ```
#[derive(Debug, Default)]
pub struct Progress {
    partitions: SlotVec<PartitionProgress>,
}

impl Progress {
    fn slot(&mut self, slot: SlotId) -> &mut PartitionProgress {
        self.partitions.entry(slot as usize)
    }

    /// A record at `offset` was handed to the producer.
    pub fn sent(&mut self, slot: SlotId, offset: SourceOffset) {
        self.slot(slot).pending.push_back((offset, false));
    }

    /// Everything up to `offset` that was not sent (dropped by policy) needs no acknowledgement.
    pub fn skipped_through(&mut self, slot: SlotId, offset: SourceOffset) {
        let p = self.slot(slot);
        if p.pending.back().is_none_or(|&(last, _)| last < offset) && p.position.is_none_or(|pos| pos <= offset) {
            p.pending.push_back((offset, true));
            p.advance();
        }
    }

    /// The target acknowledged the record at `offset`.
    pub fn acked(&mut self, slot: SlotId, offset: SourceOffset) {
        let p = self.slot(slot);
        // Acks come in order per partition, so the front is the usual hit.
        let index = match p.pending.front() {
            Some(&(front, _)) if front == offset => Some(0),
            _ => p.pending.binary_search_by_key(&offset, |&(o, _)| o).ok(),
        };
        if let Some(i) = index {
            p.pending[i].1 = true;
            p.advance();
        }
    }

    /// The next offset to fetch for `slot` after a restart, if any record was completed.
    pub fn position(&self, slot: SlotId) -> Option<SourceOffset> {
        self.partitions.get(slot as usize).and_then(|p| p.position)
    }

    /// Records handed to the producer and not yet acknowledged, over all partitions.
    pub fn in_flight(&self) -> usize {
        self.partitions.iter().map(|p| p.pending.len()).sum()
    }

    /// Marks every known position as changed, so the next [`Progress::take_changed`] returns all.
    pub fn mark_all_changed(&mut self) {
        for p in &mut self.partitions {
            p.dirty = p.position.is_some();
        }
    }

    /// Positions that moved since the last call.
    pub fn take_changed(&mut self) -> Vec<(SlotId, SourceOffset)> {
        let mut out = Vec::new();
        for (i, p) in self.partitions.iter_mut().enumerate() {
            if p.dirty {
                p.dirty = false;
                if let Some(pos) = p.position {
                    out.push((i as SlotId, pos));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_stops_at_the_first_unacked_record() {
        let mut p = Progress::default();
        for o in 0..5 {
            p.sent(1, SourceOffset(o));
        }
        p.acked(1, SourceOffset(0));
        p.acked(1, SourceOffset(2));
        p.acked(1, SourceOffset(3));
        assert_eq!(p.position(1), Some(SourceOffset(1)));
        assert_eq!(p.take_changed(), vec![(1, SourceOffset(1))]);
        assert_eq!(p.take_changed(), vec![]);
        p.acked(1, SourceOffset(1));
        assert_eq!(p.position(1), Some(SourceOffset(4)));
        assert_eq!(p.in_flight(), 1);
    }

    #[test]
    fn dropped_records_and_offset_gaps_advance_once_their_predecessors_are_acked() {
        let mut p = Progress::default();
        p.sent(0, SourceOffset(10));
        p.sent(0, SourceOffset(13)); // 11 and 12 were transaction markers or compacted away
        p.skipped_through(0, SourceOffset(15)); // 14 and 15 were dropped by the filter
        assert_eq!(p.position(0), None);
        p.acked(0, SourceOffset(10));
        assert_eq!(p.position(0), Some(SourceOffset(11)));
        p.acked(0, SourceOffset(13));
        assert_eq!(p.position(0), Some(SourceOffset(16)));
        p.skipped_through(0, SourceOffset(20));
        assert_eq!(p.position(0), Some(SourceOffset(21)));
        p.skipped_through(0, SourceOffset(20)); // repeated cover is harmless
        assert_eq!(p.position(0), Some(SourceOffset(21)));
    }
}
