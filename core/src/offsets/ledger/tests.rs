//! The ledger against hand-written cases and generated histories (proptest).

use std::collections::{BTreeSet, HashSet};

use proptest::prelude::*;
use proptest::sample::Index;

use super::*;

fn run(upstream: i64, downstream: i64, len: i64) -> Run {
    Run { upstream: SourceOffset(upstream), downstream: TargetOffset(downstream), len }
}

fn position(slot: SlotId, next: i64, open: Option<Run>) -> PositionWrite {
    PositionWrite::Position { slot, next: SourceOffset(next), open }
}

/// Sends `offsets` of `slot` and acknowledges each at `landed = offset + shift`.
fn replicate(l: &mut Ledger, slot: SlotId, offsets: impl IntoIterator<Item = i64>, shift: i64) {
    let offsets: Vec<i64> = offsets.into_iter().collect();
    for &o in &offsets {
        l.sent(slot, SourceOffset(o));
    }
    for &o in &offsets {
        l.acked(slot, SourceOffset(o), Some(TargetOffset(o + shift)));
    }
}

#[test]
fn a_refused_record_holds_the_position_before_it() {
    let mut l = Ledger::new(None);
    for o in 0..3 {
        l.sent(0, SourceOffset(o));
    }
    l.acked(0, SourceOffset(0), Some(TargetOffset(100)));
    l.refused(0, SourceOffset(1), "too large".into());
    l.acked(0, SourceOffset(2), Some(TargetOffset(101)));
    l.skipped_through(0, SourceOffset(5));
    assert_eq!(l.position(0), Some(SourceOffset(1)));
    assert_eq!(l.refusal(), Some(&Refusal { slot: 0, offset: SourceOffset(1), reason: "too large".into() }));
    assert_eq!(l.in_flight(), 3, "the refused record and what completed behind it");
    assert_eq!(
        l.take_writes(),
        vec![PositionWrite::ClosedRun { slot: 0, run: run(0, 100, 1) }, position(0, 1, Some(run(2, 101, 1)))],
        "1 is a gap to the mapping"
    );
}

#[test]
fn only_the_first_refusal_is_kept() {
    let mut l = Ledger::new(None);
    l.sent(0, SourceOffset(0));
    l.sent(1, SourceOffset(0));
    l.refused(1, SourceOffset(0), "first".into());
    l.refused(0, SourceOffset(0), "second".into());
    assert_eq!(l.refusal().map(|r| (r.slot, r.reason.as_str())), Some((1, "first")));
}

#[test]
fn out_of_order_acks_move_the_position_only_over_the_acked_prefix() {
    let mut l = Ledger::new(None);
    for o in 10..14 {
        l.sent(3, SourceOffset(o));
    }
    l.acked(3, SourceOffset(12), None);
    l.acked(3, SourceOffset(10), None);
    assert_eq!(l.position(3), Some(SourceOffset(11)));
    l.acked(3, SourceOffset(11), None);
    assert_eq!(l.position(3), Some(SourceOffset(13)));
    assert_eq!(l.in_flight(), 1);
    assert_eq!(l.position(2), None, "a slot never named has no position");
}

#[test]
fn dropped_records_and_offset_gaps_move_the_position_once_their_predecessors_are_acked() {
    let mut l = Ledger::new(None);
    l.sent(0, SourceOffset(10));
    l.sent(0, SourceOffset(13)); // 11 and 12: a transaction marker, a compacted record
    l.skipped_through(0, SourceOffset(15)); // 14 and 15 dropped by the filter
    assert_eq!(l.position(0), None);
    l.acked(0, SourceOffset(10), Some(TargetOffset(0)));
    assert_eq!(l.position(0), Some(SourceOffset(11)));
    l.acked(0, SourceOffset(13), Some(TargetOffset(1)));
    assert_eq!(l.position(0), Some(SourceOffset(16)));
    l.skipped_through(0, SourceOffset(20)); // a batch the filter dropped whole
    assert_eq!(l.position(0), Some(SourceOffset(21)));
    assert_eq!(l.in_flight(), 0);
}

#[test]
fn closed_runs_are_written_before_the_positions_that_follow_them() {
    let mut l = Ledger::new(None);
    replicate(&mut l, 0, 0..2, 100);
    replicate(&mut l, 1, 0..1, 7);
    replicate(&mut l, 0, 2..3, 103); // the target jumped: another writer, or a re-send
    assert_eq!(
        l.take_writes(),
        vec![
            PositionWrite::ClosedRun { slot: 0, run: run(0, 100, 2) },
            position(0, 3, Some(run(2, 105, 1))),
            position(1, 1, Some(run(0, 7, 1))),
        ]
    );
}

#[test]
fn positions_are_written_only_when_they_move() {
    let mut l = Ledger::new(None);
    replicate(&mut l, 0, 0..5, 0);
    assert_eq!(l.take_writes(), vec![position(0, 5, Some(run(0, 0, 5)))]);
    assert_eq!(l.take_writes(), vec![]);
    l.sent(0, SourceOffset(5));
    assert_eq!(l.take_writes(), vec![], "sent is not done");
    l.acked(0, SourceOffset(5), Some(TargetOffset(5)));
    assert_eq!(l.take_writes(), vec![position(0, 6, Some(run(0, 0, 6)))]);
}

#[test]
fn a_routed_record_moves_the_position_but_breaks_the_run_and_gets_no_sync() {
    let mut l = Ledger::new(Some(100));
    for o in 0..3 {
        l.sent(0, SourceOffset(o));
    }
    l.acked(0, SourceOffset(0), Some(TargetOffset(0)));
    l.acked(0, SourceOffset(1), None);
    l.acked(0, SourceOffset(2), Some(TargetOffset(1)));
    assert_eq!(l.position(0), Some(SourceOffset(3)));
    assert_eq!(
        l.take_writes(),
        vec![PositionWrite::ClosedRun { slot: 0, run: run(0, 0, 1) }, position(0, 3, Some(run(2, 1, 1)))]
    );
    let synced: Vec<i64> = l.take_syncs().iter().map(|(_, s)| s.upstream).collect();
    assert_eq!(synced, vec![0, 2], "the first record, then the upstream skip over the routed one");
}

#[test]
fn offset_syncs_follow_mm2s_rule_in_ack_order() {
    let mut l = Ledger::new(Some(10));
    replicate(&mut l, 0, 0..25, 1000);
    replicate(&mut l, 1, 0..3, 0);
    assert_eq!(
        l.take_syncs(),
        vec![
            (0, OffsetSync { upstream: 0, downstream: 1000 }),
            (0, OffsetSync { upstream: 11, downstream: 1011 }),
            (0, OffsetSync { upstream: 22, downstream: 1022 }),
            (1, OffsetSync { upstream: 0, downstream: 0 }),
        ]
    );
    assert_eq!(l.take_syncs(), vec![]);
}

#[test]
fn no_offset_syncs_without_a_lag() {
    let mut l = Ledger::new(None);
    replicate(&mut l, 0, 0..5, 0);
    assert_eq!(l.take_syncs(), vec![]);
}

#[test]
fn a_resumed_run_continues_across_a_restart() {
    let mut l = Ledger::new(None);
    l.resume(0, Some(run(0, 50, 10)));
    replicate(&mut l, 0, 10..12, 50);
    assert_eq!(l.take_writes(), vec![position(0, 12, Some(run(0, 50, 12)))]);
}

#[test]
fn a_resumed_run_closes_when_the_restart_re_sent_records() {
    let mut l = Ledger::new(None);
    l.resume(0, Some(run(0, 50, 10)));
    replicate(&mut l, 0, 10..11, 55); // 10..15 landed at 60..65 before a crash stored them
    assert_eq!(
        l.take_writes(),
        vec![PositionWrite::ClosedRun { slot: 0, run: run(0, 50, 10) }, position(0, 11, Some(run(10, 65, 1)))]
    );
}

#[test]
fn resume_does_not_replace_a_run_grown_in_this_lifetime() {
    let mut l = Ledger::new(None);
    replicate(&mut l, 0, 0..3, 0);
    l.resume(0, Some(run(0, 50, 10)));
    assert_eq!(l.take_writes(), vec![position(0, 3, Some(run(0, 0, 3)))]);
}

#[test]
fn a_resolved_start_is_stored_once() {
    let mut l = Ledger::new(None);
    l.start_at(4, SourceOffset(50));
    assert_eq!(l.position(4), Some(SourceOffset(50)));
    assert_eq!(l.take_writes(), vec![position(4, 50, None)]);
    assert_eq!(l.take_writes(), vec![]);
    l.start_at(5, SourceOffset(0));
    assert_eq!(l.take_writes(), vec![position(5, 0, None)], "a partition that is empty from its first offset");
}

#[test]
fn a_resolved_start_is_ignored_when_the_slot_has_a_position_or_records_pending() {
    let mut l = Ledger::new(None);
    l.sent(0, SourceOffset(7));
    l.start_at(0, SourceOffset(50));
    assert_eq!(l.position(0), None, "7 is pending");
    l.acked(0, SourceOffset(7), None);
    l.start_at(0, SourceOffset(50));
    assert_eq!(l.position(0), Some(SourceOffset(8)));
}

#[test]
fn a_lost_write_rewrites_every_known_position_and_tombstone() {
    let mut l = Ledger::new(None);
    replicate(&mut l, 0, 0..2, 0);
    replicate(&mut l, 2, 0..1, 0);
    l.retire(1);
    assert_eq!(l.take_writes().len(), 3);
    l.write_failed();
    assert_eq!(
        l.take_writes(),
        vec![position(0, 2, Some(run(0, 0, 2))), position(2, 1, Some(run(0, 0, 1))), PositionWrite::Forget { slot: 1 }]
    );
    assert_eq!(l.take_writes(), vec![]);
}

#[test]
fn a_retired_slot_is_forgotten_once_and_never_positioned_again() {
    let mut l = Ledger::new(Some(100));
    replicate(&mut l, 0, 0..2, 0);
    replicate(&mut l, 0, 2..3, 10); // closes a run
    l.sent(0, SourceOffset(3));
    l.retire(0);
    l.retire(0);
    assert_eq!(l.take_writes(), vec![PositionWrite::Forget { slot: 0 }], "its closed run and position died with it");
    assert_eq!(l.take_syncs(), vec![]);
    l.acked(0, SourceOffset(3), Some(TargetOffset(11)));
    l.refused(0, SourceOffset(4), "unknown topic".into());
    l.sent(0, SourceOffset(5));
    l.start_at(0, SourceOffset(9));
    l.write_failed();
    assert_eq!(l.take_writes(), vec![PositionWrite::Forget { slot: 0 }], "a lost tombstone is rewritten, nothing else");
    assert_eq!(l.position(0), None);
    assert_eq!(l.refusal(), None);
    assert_eq!(l.in_flight(), 0);
}

#[test]
fn a_slot_never_named_can_be_retired() {
    let mut l = Ledger::new(None);
    l.retire(6);
    assert_eq!(l.take_writes(), vec![PositionWrite::Forget { slot: 6 }], "a previous lifetime may have stored it");
}

// Generated histories.

#[derive(Debug, Clone)]
enum Verdict {
    /// Acknowledged in its remote partition; `jump`: another writer appended in between.
    Landed {
        jump: bool,
    },
    Routed,
    Refused,
}

#[derive(Debug, Clone)]
enum Step {
    /// The next `len` records of a slot as one batch; `tail`: the batch's `fetched_through`
    /// reaches past its last record (a marker or compacted records follow).
    Batch {
        slot: usize,
        len: usize,
        tail: bool,
    },
    /// One outstanding acknowledgement, any slot, any order.
    Deliver {
        pick: Index,
        verdict: Verdict,
    },
    /// A start resolved to `skip` records ahead of the fetch cursor.
    StartAt {
        slot: usize,
        skip: usize,
    },
    TakeWrites,
    WriteFailed,
    /// A new process, from what the position topic holds; `graceful`: it stored first.
    Restart {
        graceful: bool,
    },
    Retire {
        slot: usize,
    },
}

/// Per slot, strictly increasing source offsets with random gaps, each either replicated or
/// dropped by a stage.
fn sources() -> impl Strategy<Value = Vec<Vec<(i64, bool)>>> {
    let slot = prop::collection::vec((0i64..3, prop::bool::weighted(0.2)), 0..16).prop_map(|records| {
        let mut next = 0;
        records
            .into_iter()
            .map(|(gap, dropped)| {
                let offset = next + gap;
                next = offset + 1;
                (offset, dropped)
            })
            .collect()
    });
    prop::collection::vec(slot, 1..4)
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let verdict = prop_oneof![
        8 => prop::bool::weighted(0.1).prop_map(|jump| Verdict::Landed { jump }),
        1 => Just(Verdict::Routed),
        1 => Just(Verdict::Refused),
    ];
    let step = prop_oneof![
        12 => (0usize..4, 1usize..5, any::<bool>()).prop_map(|(slot, len, tail)| Step::Batch { slot, len, tail }),
        20 => (any::<Index>(), verdict).prop_map(|(pick, verdict)| Step::Deliver { pick, verdict }),
        2 => (0usize..4, 0usize..3).prop_map(|(slot, skip)| Step::StartAt { slot, skip }),
        6 => Just(Step::TakeWrites),
        1 => Just(Step::WriteFailed),
        2 => any::<bool>().prop_map(|graceful| Step::Restart { graceful }),
        1 => (0usize..4).prop_map(|slot| Step::Retire { slot }),
    ];
    prop::collection::vec(step, 1..100)
}

/// The outside world of a ledger and what its invariants are checked against.
struct World {
    lag: Option<i64>,
    ledger: Ledger,
    sources: Vec<Vec<(i64, bool)>>,
    // Across lifetimes.
    /// The position topic: per slot, the last position record not tombstoned.
    stored: Vec<Option<(SourceOffset, Option<Run>)>>,
    /// Where the next record lands in each remote partition.
    target_end: Vec<i64>,
    /// Every (source, target) pair ever acknowledged.
    landed: Vec<HashSet<(i64, i64)>>,
    retired: Vec<bool>,
    // This lifetime.
    /// Slots retired in this lifetime. A slot retired in an earlier one is gone: nothing
    /// names it again.
    retired_here: Vec<bool>,
    /// Index of the next record to fetch.
    cursor: Vec<usize>,
    /// Sent and not acknowledged (refused ones stay).
    outstanding: Vec<BTreeSet<i64>>,
    /// Acknowledgements still to come, any slot.
    deliveries: Vec<(usize, i64)>,
    /// The last offset sent, dropped or skipped by a resolved start.
    covered: Vec<Option<i64>>,
    /// The last position returned by `take_writes`.
    written: Vec<Option<SourceOffset>>,
    /// The position as last seen, for monotonicity between writes.
    seen: Vec<Option<SourceOffset>>,
    /// Pairs acknowledged in this lifetime, and the runs closed and returned in it.
    acked_now: Vec<Vec<(i64, i64)>>,
    closed_now: Vec<Vec<Run>>,
    /// MM2's rule replayed beside the ledger, and the syncs it expects.
    rules: Vec<Option<SyncRule>>,
    expected_syncs: Vec<(SlotId, OffsetSync)>,
    first_refusal: Option<(SlotId, SourceOffset)>,
    unwritten_forgets: BTreeSet<usize>,
    rewrite: bool,
}

impl World {
    fn new(sources: Vec<Vec<(i64, bool)>>, lag: Option<i64>) -> Self {
        let n = sources.len();
        let mut w = World {
            lag,
            ledger: Ledger::new(lag),
            sources,
            stored: vec![None; n],
            target_end: vec![0; n],
            landed: vec![HashSet::new(); n],
            retired: vec![false; n],
            retired_here: Vec::new(),
            cursor: Vec::new(),
            outstanding: Vec::new(),
            deliveries: Vec::new(),
            covered: Vec::new(),
            written: Vec::new(),
            seen: Vec::new(),
            acked_now: Vec::new(),
            closed_now: Vec::new(),
            rules: Vec::new(),
            expected_syncs: Vec::new(),
            first_refusal: None,
            unwritten_forgets: BTreeSet::new(),
            rewrite: false,
        };
        w.new_lifetime();
        w
    }

    /// Forgets everything a crashed or stopped process held, and replays from what the
    /// position topic holds.
    fn new_lifetime(&mut self) {
        let n = self.sources.len();
        self.ledger = Ledger::new(self.lag);
        self.retired_here = vec![false; n];
        self.cursor = vec![0; n];
        self.outstanding = vec![BTreeSet::new(); n];
        self.deliveries.clear();
        self.covered = vec![None; n];
        self.written = vec![None; n];
        self.seen = vec![None; n];
        self.acked_now = vec![Vec::new(); n];
        self.closed_now = vec![Vec::new(); n];
        self.rules = vec![self.lag.map(SyncRule::new); n];
        self.expected_syncs.clear();
        self.first_refusal = None;
        self.unwritten_forgets.clear();
        self.rewrite = false;
        for s in 0..n {
            if self.retired[s] {
                continue;
            }
            if let Some((next, open)) = self.stored[s] {
                self.ledger.resume(s as SlotId, open);
                self.cursor[s] = self.sources[s].partition_point(|&(o, _)| o < next.0);
            }
        }
    }

    fn apply(&mut self, step: &Step) -> Result<(), TestCaseError> {
        let n = self.sources.len();
        match *step {
            Step::Batch { slot, len, tail } => {
                let s = slot % n;
                let start = self.cursor[s];
                let end = (start + len).min(self.sources[s].len());
                if self.retired[s] || start == end {
                    return Ok(());
                }
                for &(offset, dropped) in &self.sources[s][start..end] {
                    if !dropped {
                        self.ledger.sent(s as SlotId, SourceOffset(offset));
                        self.outstanding[s].insert(offset);
                        self.deliveries.push((s, offset));
                    }
                }
                let last = self.sources[s][end - 1].0;
                let through = match (tail, self.sources[s].get(end)) {
                    (false, _) => last,
                    (true, Some(&(next, _))) => next - 1,
                    (true, None) => last + 2,
                };
                self.ledger.skipped_through(s as SlotId, SourceOffset(through));
                self.covered[s] = Some(through);
                self.cursor[s] = end;
            }
            Step::Deliver { ref pick, ref verdict } => {
                if !self.deliveries.is_empty() {
                    self.deliver(pick.index(self.deliveries.len()), verdict);
                }
            }
            Step::StartAt { slot, skip } => {
                let s = slot % n;
                if self.retired[s] && !self.retired_here[s] {
                    return Ok(());
                }
                let records = &self.sources[s];
                let at = (self.cursor[s] + skip).min(records.len());
                let next = records.get(at).map_or_else(|| records.last().map_or(0, |&(o, _)| o + 1), |&(o, _)| o);
                self.ledger.start_at(s as SlotId, SourceOffset(next));
                // Ignored once the slot has a position or records pending, which in this
                // lifetime is exactly once it covered something.
                if !self.retired[s] && self.covered[s].is_none() {
                    self.covered[s] = Some(next - 1);
                    self.cursor[s] = at;
                }
            }
            Step::TakeWrites => self.take_writes()?,
            Step::WriteFailed => {
                self.ledger.write_failed();
                self.rewrite = true;
            }
            Step::Restart { graceful } => {
                if graceful {
                    self.take_writes()?;
                }
                self.new_lifetime();
            }
            Step::Retire { slot } => {
                let s = slot % n;
                if self.retired[s] && !self.retired_here[s] {
                    return Ok(());
                }
                self.ledger.retire(s as SlotId);
                if !self.retired[s] {
                    self.unwritten_forgets.insert(s);
                }
                self.retired[s] = true;
                self.retired_here[s] = true;
                self.outstanding[s].clear();
                self.expected_syncs.retain(|&(slot, _)| slot != s as SlotId);
            }
        }
        Ok(())
    }

    /// Delivers the `i`th outstanding acknowledgement.
    fn deliver(&mut self, i: usize, verdict: &Verdict) {
        let (s, offset) = self.deliveries.swap_remove(i);
        let live = !self.retired[s];
        match *verdict {
            Verdict::Landed { jump } => {
                self.target_end[s] += if jump { 3 } else { 0 };
                let target = self.target_end[s];
                self.target_end[s] += 1;
                self.ledger.acked(s as SlotId, SourceOffset(offset), Some(TargetOffset(target)));
                self.landed[s].insert((offset, target));
                if live {
                    self.acked_now[s].push((offset, target));
                    if self.rules[s].as_mut().is_some_and(|r| r.update(SourceOffset(offset), TargetOffset(target))) {
                        self.expected_syncs.push((s as SlotId, OffsetSync { upstream: offset, downstream: target }));
                    }
                }
                self.outstanding[s].remove(&offset);
            }
            Verdict::Routed => {
                self.ledger.acked(s as SlotId, SourceOffset(offset), None);
                self.outstanding[s].remove(&offset);
            }
            Verdict::Refused => {
                self.ledger.refused(s as SlotId, SourceOffset(offset), format!("refused {s}/{offset}"));
                if live && self.first_refusal.is_none() {
                    self.first_refusal = Some((s as SlotId, SourceOffset(offset)));
                }
            }
        }
    }

    fn take_writes(&mut self) -> Result<(), TestCaseError> {
        let writes = self.ledger.take_writes();
        let rank = |w: &PositionWrite| match w {
            PositionWrite::ClosedRun { .. } => 0,
            PositionWrite::Position { .. } => 1,
            PositionWrite::Forget { .. } => 2,
        };
        prop_assert!(writes.windows(2).all(|w| rank(&w[0]) <= rank(&w[1])), "out of order: {writes:?}");
        let mut positioned = BTreeSet::new();
        let mut forgotten = BTreeSet::new();
        for write in &writes {
            match *write {
                PositionWrite::ClosedRun { slot, run } => {
                    let s = slot as usize;
                    prop_assert!(!self.retired[s], "closed run of retired slot {s}");
                    self.check_run(s, run)?;
                    self.closed_now[s].push(run);
                }
                PositionWrite::Position { slot, next, open } => {
                    let s = slot as usize;
                    prop_assert!(!self.retired[s], "invariant 4: position of retired slot {s}");
                    prop_assert!(positioned.insert(s), "two positions for slot {s}");
                    if let Some(&first) = self.outstanding[s].first() {
                        prop_assert!(
                            next.0 <= first,
                            "invariant 1: slot {s} stored {next:?} past unacknowledged {first}"
                        );
                    }
                    prop_assert!(
                        self.written[s] <= Some(next),
                        "invariant 1: slot {s} went back from {:?} to {next:?}",
                        self.written[s]
                    );
                    prop_assert_eq!(Some(next), self.ledger.position(slot));
                    if let Some(run) = open {
                        self.check_run(s, run)?;
                    }
                    self.written[s] = Some(next);
                    self.stored[s] = Some((next, open));
                }
                PositionWrite::Forget { slot } => {
                    let s = slot as usize;
                    prop_assert!(self.retired[s], "forgot live slot {s}");
                    prop_assert!(forgotten.insert(s), "two tombstones for slot {s}");
                    self.stored[s] = None;
                }
            }
        }
        for s in 0..self.sources.len() {
            if self.retired[s] {
                continue;
            }
            let position = self.ledger.position(s as SlotId);
            prop_assert_eq!(self.written[s], position, "slot {} moved but was not written", s);
            if self.rewrite && position.is_some() {
                prop_assert!(positioned.contains(&s), "slot {s} not rewritten after a lost write");
            }
        }
        prop_assert!(self.unwritten_forgets.is_subset(&forgotten), "tombstones missing: {:?}", self.unwritten_forgets);
        self.unwritten_forgets.clear();
        self.rewrite = false;
        Ok(())
    }

    /// Invariant 3: a run maps only pairs that were acknowledged, consecutively.
    fn check_run(&self, s: usize, run: Run) -> Result<(), TestCaseError> {
        prop_assert!(run.len >= 1, "empty run {run:?}");
        for k in 0..run.len {
            let pair = (run.upstream.after(k).get(), run.downstream.after(k).get());
            prop_assert!(
                self.landed[s].contains(&pair),
                "invariant 3: slot {s} run {run:?} maps {pair:?}, never acknowledged"
            );
        }
        Ok(())
    }

    fn check(&mut self) -> Result<(), TestCaseError> {
        let mut outstanding = 0;
        for s in 0..self.sources.len() {
            let slot = s as SlotId;
            let position = self.ledger.position(slot);
            if self.retired[s] {
                prop_assert_eq!(position, None, "invariant 4: retired slot {} has a position", s);
                continue;
            }
            outstanding += self.outstanding[s].len();
            if let (Some(p), Some(&first)) = (position, self.outstanding[s].first()) {
                prop_assert!(p.0 <= first, "invariant 1: slot {s} at {p:?} past unacknowledged {first}");
            }
            prop_assert!(
                self.seen[s] <= position,
                "invariant 1: slot {s} went back from {:?} to {position:?}",
                self.seen[s]
            );
            self.seen[s] = position;
            match self.covered[s] {
                None => {
                    prop_assert_eq!(position, None, "slot {} covered nothing", s)
                }
                Some(last) if self.outstanding[s].is_empty() => {
                    prop_assert_eq!(position, Some(SourceOffset(last + 1)), "invariant 2: slot {} all acknowledged", s)
                }
                Some(_) => {}
            }
            // No acknowledged mapping is lost: each pair is in a run returned, pending or open.
            let Some(p) = self.ledger.get(slot) else { continue };
            let pending = self.ledger.closed.iter().filter(|&&(c, _)| c == slot).map(|&(_, r)| r);
            let runs: Vec<Run> = self.closed_now[s].iter().copied().chain(pending).chain(p.runs.open()).collect();
            for &(up, down) in &self.acked_now[s] {
                let covered = runs.iter().any(|r| {
                    (r.upstream..r.upstream.after(r.len)).contains(&SourceOffset(up))
                        && TargetOffset(down).since(r.downstream) == SourceOffset(up).since(r.upstream)
                });
                prop_assert!(covered, "slot {s}: acknowledged {up} -> {down} is in no run");
            }
        }
        let in_flight = self.ledger.in_flight();
        prop_assert!(
            in_flight >= outstanding && (in_flight == 0) == (outstanding == 0),
            "in flight {in_flight}, outstanding {outstanding}"
        );
        prop_assert_eq!(self.ledger.refusal().map(|r| (r.slot, r.offset)), self.first_refusal);
        let syncs = self.ledger.take_syncs();
        for (slot, sync) in &syncs {
            prop_assert!(
                self.landed[*slot as usize].contains(&(sync.upstream, sync.downstream)),
                "sync {sync:?} never acknowledged"
            );
        }
        prop_assert_eq!(syncs, std::mem::take(&mut self.expected_syncs), "syncs differ from MM2's rule in ack order");
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn generated_histories_keep_every_invariant(
        sources in sources(),
        steps in steps(),
        lag in prop::option::of(1i64..5),
    ) {
        let mut world = World::new(sources, lag);
        world.check()?;
        for step in &steps {
            world.apply(step)?;
            world.check()?;
        }
    }

    #[test]
    fn once_everything_is_acknowledged_the_stored_position_is_one_past_the_last_record(
        sources in sources(),
        order in prop::collection::vec(any::<Index>(), 0..64),
    ) {
        // Everything sent in one batch per slot, acknowledged in a random order across slots.
        let mut world = World::new(sources, Some(3));
        for s in 0..world.sources.len() {
            let len = world.sources[s].len();
            world.apply(&Step::Batch { slot: s, len: len.max(1), tail: false })?;
            world.check()?;
        }
        let landed = Verdict::Landed { jump: false };
        for pick in order.iter().cycle().take(world.deliveries.len()) {
            world.deliver(pick.index(world.deliveries.len()), &landed);
            world.check()?;
        }
        while !world.deliveries.is_empty() {
            world.deliver(0, &landed);
            world.check()?;
        }
        world.take_writes()?;
        world.check()?;
        for s in 0..world.sources.len() {
            let expected = world.sources[s].last().map(|&(o, _)| SourceOffset(o + 1));
            prop_assert_eq!(world.stored[s].map(|(next, _)| next), expected);
        }
    }
}
