//! The produce stage's at-least-once bookkeeping in one place: which source positions may be
//! stored, which runs of the offset mapping closed, which MM2 offset syncs are due, and whether
//! the target refused a record.
//!
//! It does no I/O and reads no clock, so every rule it keeps can be tested against generated
//! histories (acknowledgements out of order, lost writes, restarts) without a broker; the produce
//! stage owns the producer, the lock and the encoding, and asks the ledger what to write.

use super::mm2::OffsetSync;
use super::{Progress, Run, RunTracker, SyncRule};
use crate::record::{SlotId, SourceOffset, TargetOffset};
use crate::slot_vec::SlotVec;

/// What must be written to the position topic, in this order (closed runs before the position
/// that follows them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PositionWrite {
    /// A run of the offset mapping that can no longer grow. It is written before any position
    /// that follows it, because a reader lets a position's open run supersede the runs after
    /// its start.
    ClosedRun {
        /// The source partition.
        slot: SlotId,
        /// The run.
        run: Run,
    },
    /// Where the slot resumes after a restart, with the run still growing there.
    Position {
        /// The source partition.
        slot: SlotId,
        /// The next source offset to fetch: every record before it was acknowledged or dropped.
        next: SourceOffset,
        /// The slot's open run, which rides on this record instead of costing one of its own.
        open: Option<Run>,
    },
    /// The slot's topic was deleted on the source: its stored position and runs must be
    /// forgotten (tombstones).
    Forget {
        /// The source partition.
        slot: SlotId,
    },
}

/// A record the target refused for good. The flow must stop and report it: resuming past it
/// would lose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The record's source partition.
    pub slot: SlotId,
    /// The record's source offset.
    pub offset: SourceOffset,
    /// Why the target refused it, as the producer put it.
    pub reason: String,
}

/// Every slot keeps a [`Progress`] of its own under this one key, so that retiring a slot drops
/// its pending records with it (`Progress` has no way to forget one partition).
const ALONE: SlotId = 0;

/// The bookkeeping of one live source partition.
#[derive(Debug)]
struct Partition {
    progress: Progress,
    runs: RunTracker,
    /// MM2's emission rule, when offset syncs are on.
    sync: Option<SyncRule>,
}

#[derive(Debug, Default)]
enum Entry {
    /// No call named the slot yet.
    #[default]
    Unseen,
    Live(Partition),
    /// Its topic was deleted: whatever still arrives for it is ignored, for good.
    Retired,
}

/// The acknowledgement ledger of one flow: the acked prefix of every source partition, the
/// exact offset mapping built from the acknowledgements, MM2's offset syncs, and the first
/// refused record. The default ledger is `Ledger::new(None)`: offset syncs off.
///
/// ```
/// use strait_core::offsets::{Ledger, PositionWrite, Run, SourceOffset, TargetOffset};
/// let mut l = Ledger::new(None);
/// l.sent(0, SourceOffset(10));
/// l.sent(0, SourceOffset(11));
/// l.acked(0, SourceOffset(11), None); // routed to another topic by the policy
/// assert_eq!(l.take_writes(), vec![]); // 10 is not acknowledged yet
/// l.acked(0, SourceOffset(10), Some(TargetOffset(100)));
/// let open = Some(Run { upstream: SourceOffset(10), downstream: TargetOffset(100), len: 1 });
/// assert_eq!(l.take_writes(), vec![PositionWrite::Position { slot: 0, next: SourceOffset(12), open }]);
/// ```
#[derive(Debug, Default)]
pub struct Ledger {
    offset_lag_max: Option<i64>,
    /// Indexed by slot id: ids are small and dense (see `pipeline::slots`).
    slots: SlotVec<Entry>,
    /// Runs closed since the last [`Ledger::take_writes`], in the order they closed.
    closed: Vec<(SlotId, Run)>,
    /// Offset syncs due, in acknowledgement order.
    syncs: Vec<(SlotId, OffsetSync)>,
    /// Retired slots whose tombstones are still to be written.
    forget: Vec<SlotId>,
    refusal: Option<Refusal>,
}

impl Ledger {
    /// An empty ledger; `offset_lag_max` turns on MM2's offset-sync rule with that lag.
    pub fn new(offset_lag_max: Option<i64>) -> Self {
        Self { offset_lag_max, ..Self::default() }
    }

    fn entry(&mut self, slot: SlotId) -> &mut Entry {
        self.slots.entry(slot as usize)
    }

    /// The slot's state, created on first use; `None` once the slot is retired.
    fn live(&mut self, slot: SlotId) -> Option<&mut Partition> {
        let lag = self.offset_lag_max;
        let entry = self.entry(slot);
        if let Entry::Unseen = entry {
            *entry = Entry::Live(Partition {
                progress: Progress::default(),
                runs: RunTracker::default(),
                sync: lag.map(SyncRule::new),
            });
        }
        match entry {
            Entry::Live(p) => Some(p),
            _ => None,
        }
    }

    fn get(&self, slot: SlotId) -> Option<&Partition> {
        match self.slots.get(slot as usize) {
            Some(Entry::Live(p)) => Some(p),
            _ => None,
        }
    }

    /// Continues the open run a previous lifetime stored with the slot's position, so a restart
    /// that picks up exactly where it stopped does not break the mapping. Call it before the
    /// slot's first acknowledgement: once this lifetime has grown a run of its own, that run is
    /// newer and the call is ignored.
    pub fn resume(&mut self, slot: SlotId, open_run: Option<Run>) {
        if let Some(p) = self.live(slot) {
            if p.runs.open().is_none() {
                p.runs = RunTracker::resume(open_run);
            }
        }
    }

    /// The slot's start was resolved now (for example `auto.offset.reset=latest` with no stored
    /// position): its position is `next`, and the next [`Ledger::take_writes`] stores it, so a
    /// restart does not resolve "latest" again and skip the records in between. Ignored if the
    /// slot already has a position or records pending.
    pub fn start_at(&mut self, slot: SlotId, next: SourceOffset) {
        let Some(p) = self.live(slot) else { return };
        if p.progress.position(ALONE).is_some() || p.progress.in_flight() > 0 {
            return;
        }
        // Covering everything before `next` as dropped makes `next` the position, marked as
        // moved, by Progress's own rule.
        if let Some(before) = next.previous() {
            p.progress.skipped_through(ALONE, before);
        }
    }

    /// The record at `offset` was handed to the producer: the position may not pass it until it
    /// is acknowledged.
    pub fn sent(&mut self, slot: SlotId, offset: SourceOffset) {
        if let Some(p) = self.live(slot) {
            p.progress.sent(ALONE, offset);
        }
    }

    /// Every record up to `offset` that was not sent (a stage dropped it, or the offset is a
    /// gap: a transaction marker, a compacted record) needs no acknowledgement. Call it once the
    /// records before it were sent, as the produce stage does with a batch's `fetched_through`.
    pub fn skipped_through(&mut self, slot: SlotId, offset: SourceOffset) {
        if let Some(p) = self.live(slot) {
            p.progress.skipped_through(ALONE, offset);
        }
    }

    /// The target acknowledged the record at `offset`. `landed` is where it landed in the
    /// slot's remote partition, or `None` when the policy routed it to another topic: then it
    /// mirrors nothing, so it gets no offset sync and is a gap to the run mapping. An
    /// acknowledgement for a retired slot is ignored: its topic is gone.
    pub fn acked(&mut self, slot: SlotId, offset: SourceOffset, landed: Option<TargetOffset>) {
        let Some(p) = self.live(slot) else { return };
        p.progress.acked(ALONE, offset);
        let Some(landed) = landed else { return };
        let due = p.sync.as_mut().is_some_and(|rule| rule.update(offset, landed));
        let closed = p.runs.acked(offset, landed);
        if due {
            self.syncs.push((slot, OffsetSync { upstream: offset.get(), downstream: landed.get() }));
        }
        if let Some(run) = closed {
            self.closed.push((slot, run));
        }
    }

    /// The target refused the record at `offset` for good. Only the first refusal is kept: the
    /// flow stops on it, and later ones are usually its consequences. The record is never
    /// acknowledged, so the position never passes it and a restart retries it. A refusal for a
    /// retired slot is ignored: nothing will resume at it.
    pub fn refused(&mut self, slot: SlotId, offset: SourceOffset, reason: String) {
        if self.live(slot).is_some() && self.refusal.is_none() {
            self.refusal = Some(Refusal { slot, offset, reason });
        }
    }

    /// The first record the target refused, if any.
    pub fn refusal(&self) -> Option<&Refusal> {
        self.refusal.as_ref()
    }

    /// The next offset to fetch for `slot` after a restart, if any of its records completed
    /// (or its start was resolved) in this lifetime.
    pub fn position(&self, slot: SlotId) -> Option<SourceOffset> {
        self.get(slot).and_then(|p| p.progress.position(ALONE))
    }

    /// What the positions still wait on, over all live slots: records not yet acknowledged
    /// (a refused one stays), and completed ones queued behind them. Zero exactly when every
    /// sent record was acknowledged.
    pub fn in_flight(&self) -> usize {
        self.slots.iter().map(|e| if let Entry::Live(p) = e { p.progress.in_flight() } else { 0 }).sum()
    }

    /// The offset syncs due since the last call, in acknowledgement order.
    pub fn take_syncs(&mut self) -> Vec<(SlotId, OffsetSync)> {
        std::mem::take(&mut self.syncs)
    }

    /// What to write to the position topic since the last call: closed runs first, in the
    /// order they closed; then a position for every slot whose position moved, with the slot's
    /// open run; then tombstones of retired slots.
    pub fn take_writes(&mut self) -> Vec<PositionWrite> {
        let mut writes: Vec<PositionWrite> =
            self.closed.drain(..).map(|(slot, run)| PositionWrite::ClosedRun { slot, run }).collect();
        for (i, entry) in self.slots.iter_mut().enumerate() {
            let Entry::Live(p) = entry else { continue };
            for (_, next) in p.progress.take_changed() {
                writes.push(PositionWrite::Position { slot: i as SlotId, next, open: p.runs.open() });
            }
        }
        writes.extend(self.forget.drain(..).map(|slot| PositionWrite::Forget { slot }));
        writes
    }

    /// A write to the position topic was lost. Which one is not known, so the next
    /// [`Ledger::take_writes`] rewrites every known position and every tombstone. Closed runs
    /// already taken are not rewritten: the ledger no longer holds them.
    pub fn write_failed(&mut self) {
        for (i, entry) in self.slots.iter_mut().enumerate() {
            match entry {
                Entry::Live(p) => p.progress.mark_all_changed(),
                Entry::Retired if !self.forget.contains(&(i as SlotId)) => self.forget.push(i as SlotId),
                _ => {}
            }
        }
    }

    /// The slot's topic was deleted on the source: its state is dropped (pending runs and
    /// syncs included), the next [`Ledger::take_writes`] returns [`PositionWrite::Forget`] for
    /// it, and no position of it is returned again, whatever arrives for it later. A recreated
    /// topic gets a new slot.
    pub fn retire(&mut self, slot: SlotId) {
        let entry = self.entry(slot);
        if let Entry::Retired = entry {
            return;
        }
        *entry = Entry::Retired;
        self.closed.retain(|&(s, _)| s != slot);
        self.syncs.retain(|&(s, _)| s != slot);
        self.forget.push(slot);
    }
}

#[cfg(test)]
mod tests;
