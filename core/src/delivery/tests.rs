//! The strategy driven by a fake target through generated histories: acknowledgements out of
//! order, refused records and position writes, full queues, failed and slow commits and
//! aborts, fences, and a stop or park at any step. The ledger is the real one.
//!
//! Each history checks, after every step:
//! - a stored position never passes a record that is not durable on the target (acknowledged,
//!   or committed in the transactional mode);
//! - in the transactional mode no record is sent outside a transaction, and a stopped or
//!   parked strategy leaves no transaction open;
//! - after a fence, or any failure that stops the flow, nothing more is written, begun,
//!   committed or stored.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::sample::Index;

use super::*;
use crate::offsets::{Ledger, PositionWrite, SourceOffset, TargetOffset};
use crate::record::SlotId;

/// Partitions of the fake flow; in the transactional mode each has a lane of its own.
const PARTITIONS: usize = 2;
const INTERVAL: Duration = Duration::from_millis(100);

/// A record or a position record the fake producer holds, not yet acknowledged.
#[derive(Debug, Clone)]
enum Pending {
    Record { slot: SlotId, offset: i64, lane: usize },
    Position { lane: usize, slot: SlotId, next: Option<i64> },
}

/// What an acknowledged item did inside the lane's open transaction.
#[derive(Debug, Default, Clone)]
struct Staged {
    records: Vec<(SlotId, i64)>,
    positions: Vec<(SlotId, Option<i64>)>,
    /// A record of this transaction was refused: committing it would leave a hole that a
    /// restart at the refused record fills with duplicates.
    lost_record: bool,
}

/// The fake target's producers.
struct FakeLane {
    mode: Mode,
    in_flight: Vec<Pending>,
    /// Transactional: per lane, whether a transaction is open and what it holds.
    open: Vec<bool>,
    staged: Vec<Staged>,
    /// The position topic as a reader sees it (acknowledged, or committed).
    stored: BTreeMap<SlotId, i64>,
    /// Records a reader sees on the target (acknowledged, or committed).
    durable: BTreeMap<SlotId, BTreeSet<i64>>,
    queue_full: bool,
    fail_next_write: bool,
    fail_next_commit: bool,
    commit_pending: u32,
    abort_pending: u32,
    fenced: bool,
    /// Set once the strategy said the flow cannot go on.
    failed: bool,
    /// What the strategy did that it must not have.
    wrong: Vec<&'static str>,
}

/// The fenced mode's fake position writer.
#[derive(Default)]
struct FakeWriter {
    batch: Option<Vec<PositionRecord>>,
    result: Option<Outcome>,
    stored: BTreeMap<SlotId, i64>,
    fenced: bool,
    failed: bool,
    wrong: Vec<&'static str>,
}

/// The fake target, the real ledger, and the offsets sent so far.
struct World {
    mode: Mode,
    lane: FakeLane,
    book: Ledger,
    writer: FakeWriter,
    next_offset: BTreeMap<SlotId, i64>,
}

fn store(map: &mut BTreeMap<SlotId, i64>, slot: SlotId, next: Option<i64>) {
    match next {
        Some(next) => map.insert(slot, next),
        None => map.remove(&slot),
    };
}

impl World {
    fn new(mode: Mode) -> Self {
        Self {
            mode,
            lane: FakeLane {
                mode,
                in_flight: Vec::new(),
                open: vec![false; PARTITIONS],
                staged: vec![Staged::default(); PARTITIONS],
                stored: BTreeMap::new(),
                durable: BTreeMap::new(),
                queue_full: false,
                fail_next_write: false,
                fail_next_commit: false,
                commit_pending: 0,
                abort_pending: 0,
                fenced: false,
                failed: false,
                wrong: Vec::new(),
            },
            book: Ledger::new(None),
            writer: FakeWriter::default(),
            next_offset: BTreeMap::new(),
        }
    }

    fn refused(&self) -> bool {
        self.book.refusal().is_some()
    }

    /// The strategy said the flow cannot go on: from now on it may only abort.
    fn failed(&mut self) {
        self.lane.failed = true;
        self.writer.failed = true;
    }

    fn fence(&mut self) {
        match self.mode {
            Mode::Transactional => self.lane.fenced = true,
            Mode::Fenced => self.writer.fenced = true,
            Mode::AtLeastOnce => {}
        }
    }

    /// The stage sends `n` records of `slot`.
    fn send(&mut self, slot: SlotId, n: u8) {
        for _ in 0..n {
            let offset = *self.next_offset.entry(slot).and_modify(|o| *o += 1).or_insert(0);
            let lane = self.lane.lane_of(slot as i32).unwrap_or(0);
            if self.mode == Mode::Transactional && !self.lane.open[lane] {
                self.lane.wrong.push("a record sent outside a transaction");
            }
            if self.lane.failed {
                self.lane.wrong.push("a record sent after the flow failed");
            }
            self.book.sent(slot, SourceOffset(offset));
            self.lane.in_flight.push(Pending::Record { slot, offset, lane });
        }
    }

    /// The target answers the `i`-th item in flight: acknowledged, or refused.
    fn answer(&mut self, i: usize, ok: bool) {
        if self.lane.in_flight.is_empty() {
            return;
        }
        let at = i % self.lane.in_flight.len();
        let item = self.lane.in_flight.remove(at);
        let transactional = self.mode == Mode::Transactional;
        match item {
            Pending::Record { slot, offset, lane } if ok => {
                self.book.acked(slot, SourceOffset(offset), Some(TargetOffset(offset)));
                if transactional {
                    self.lane.staged[lane].records.push((slot, offset));
                } else {
                    self.lane.durable.entry(slot).or_default().insert(offset);
                }
            }
            Pending::Record { slot, offset, lane } => {
                if transactional {
                    self.lane.staged[lane].lost_record = true;
                }
                Ledger::refused(&mut self.book, slot, SourceOffset(offset), "refused".into())
            }
            Pending::Position { lane, slot, next } if ok => {
                if transactional {
                    self.lane.staged[lane].positions.push((slot, next));
                } else {
                    store(&mut self.lane.stored, slot, next);
                }
            }
            // A lost position write: the ledger writes it again, as the delivery callback does.
            Pending::Position { .. } => self.book.write_failed(),
        }
    }

    /// Answers the first item in flight of the kind `record` says, counting from `i`.
    fn answer_kind(&mut self, i: Index, record: bool, ok: bool) {
        let n = self.lane.in_flight.len();
        if n == 0 {
            return;
        }
        let start = i.index(n);
        let found = (0..n)
            .map(|k| (start + k) % n)
            .find(|&at| matches!(self.lane.in_flight[at], Pending::Record { .. }) == record);
        if let Some(at) = found {
            self.answer(at, ok);
        }
    }

    /// Every stored position covers only durable records.
    fn check_positions(&self) -> Result<(), TestCaseError> {
        for (slot, next) in self.lane.stored.iter().chain(&self.writer.stored) {
            let durable = self.lane.durable.get(slot);
            for offset in 0..*next {
                prop_assert!(
                    durable.is_some_and(|d| d.contains(&offset)),
                    "slot {slot}: stored position {next} passes record {offset}, which is not durable"
                );
            }
        }
        Ok(())
    }

    fn wrong(&self) -> Vec<&'static str> {
        self.lane.wrong.iter().chain(&self.writer.wrong).copied().collect()
    }
}

fn decode(record: &PositionRecord) -> (SlotId, Option<i64>) {
    let slot = record.partition as SlotId;
    let next = record.value.as_ref().and_then(|v| Some(i64::from_be_bytes(v.get(..8)?.try_into().ok()?)));
    (slot, next)
}

impl Lane for FakeLane {
    fn lane_of(&self, partition: i32) -> Option<usize> {
        Some(if self.mode == Mode::Transactional { partition as usize } else { 0 })
    }

    fn write(&mut self, lane: usize, record: &PositionRecord) -> Write {
        if self.failed {
            self.wrong.push("a position written after the flow failed");
        }
        if self.mode == Mode::Transactional && !self.open[lane] {
            self.wrong.push("a position written outside a transaction");
        }
        if self.fenced {
            return Write::Failed("fenced".into());
        }
        if std::mem::take(&mut self.fail_next_write) {
            return Write::Failed("refused".into());
        }
        if self.queue_full {
            return Write::Full;
        }
        let (slot, next) = decode(record);
        self.in_flight.push(Pending::Position { lane, slot, next });
        Write::Taken
    }

    fn poll(&mut self, _wait: Duration) {}

    fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn begin(&mut self) -> Result<(), String> {
        if self.failed {
            self.wrong.push("a transaction begun after the flow failed");
        }
        if self.fenced {
            return Err("fenced".into());
        }
        self.open = vec![true; PARTITIONS];
        Ok(())
    }

    fn commit(&mut self, _wait: Duration) -> Result<bool, String> {
        if self.failed {
            self.wrong.push("a commit after the flow failed");
        }
        if self.fenced {
            return Err("fenced".into());
        }
        if std::mem::take(&mut self.fail_next_commit) {
            return Err("the coordinator refused".into());
        }
        if !self.in_flight.is_empty() {
            // librdkafka flushes before it commits.
            return Ok(false);
        }
        if self.commit_pending > 0 {
            self.commit_pending -= 1;
            return Ok(false);
        }
        if self.staged.iter().any(|s| s.lost_record) {
            self.wrong.push("a transaction committed with a refused record");
        }
        for lane in 0..PARTITIONS {
            let staged = std::mem::take(&mut self.staged[lane]);
            for (slot, offset) in staged.records {
                self.durable.entry(slot).or_default().insert(offset);
            }
            for (slot, next) in staged.positions {
                store(&mut self.stored, slot, next);
            }
            self.open[lane] = false;
        }
        Ok(true)
    }

    fn abort(&mut self, _wait: Duration) -> Abort {
        if self.fenced {
            // The new owner's init aborted it.
            self.open = vec![false; PARTITIONS];
            return Abort::Failed("fenced".into());
        }
        if self.abort_pending > 0 {
            self.abort_pending -= 1;
            return Abort::Pending;
        }
        // Purged: their reports are errors, and the flow ends anyway.
        self.in_flight.clear();
        self.staged = vec![Staged::default(); PARTITIONS];
        self.open = vec![false; PARTITIONS];
        Abort::Done
    }
}

impl Book for Ledger {
    fn take(&mut self) -> Vec<PositionRecord> {
        self.take_writes()
            .into_iter()
            .filter_map(|write| match write {
                PositionWrite::Position { slot, next, .. } => Some(PositionRecord {
                    partition: slot as i32,
                    key: vec![slot as u8],
                    value: Some(next.0.to_be_bytes().to_vec()),
                    counts: Counts { partitions: 1, runs: 0, mapping_bytes: 0 },
                }),
                PositionWrite::Forget { slot } => Some(PositionRecord {
                    partition: slot as i32,
                    key: vec![slot as u8],
                    value: None,
                    counts: Counts::default(),
                }),
                // Runs are the mapping, not the position: this harness checks positions.
                PositionWrite::ClosedRun { .. } => None,
            })
            .collect()
    }

    fn lost(&mut self) {
        self.write_failed();
    }

    fn refused(&self) -> bool {
        self.refusal().is_some()
    }
}

impl Writer for FakeWriter {
    fn hand_over(&mut self, batch: Vec<PositionRecord>) -> bool {
        if self.failed {
            self.wrong.push("positions handed over after the flow failed");
        }
        if self.batch.is_some() {
            return false;
        }
        self.batch = Some(batch);
        true
    }

    fn outcome(&mut self, _wait: Duration) -> Outcome {
        let Some(batch) = self.batch.take() else { return Outcome::Idle };
        let result = if self.fenced { Some(Outcome::Failed("fenced".into())) } else { self.result.take() };
        match result {
            None => {
                self.batch = Some(batch);
                Outcome::Pending
            }
            Some(Outcome::Committed) => {
                for record in &batch {
                    let (slot, next) = decode(record);
                    store(&mut self.stored, slot, next);
                }
                Outcome::Committed
            }
            Some(other) => other,
        }
    }

    fn busy(&self) -> bool {
        self.batch.is_some()
    }
}

/// A report that only counts what was confirmed stored.
#[derive(Default)]
struct Tally {
    stored: usize,
}

impl Report for Tally {
    fn stored(&mut self, counts: Counts) {
        self.stored += counts.partitions;
    }
    fn committed(&mut self, _took: Duration) {}
    fn aborted(&mut self, _why: &str, _failure: Option<&str>) {}
    fn retrying(&mut self, _what: &str) {}
    fn readable(&mut self) {}
}

/// Runs `f` with the world's parts as the strategy's [`Io`].
fn io<T>(world: &mut World, f: impl FnOnce(&mut Io<'_>) -> T) -> T {
    let mut report = Tally::default();
    let writer = if world.mode == Mode::Fenced { Some(&mut world.writer as &mut dyn Writer) } else { None };
    f(&mut Io { lane: &mut world.lane, book: &mut world.book, writer, report: &mut report })
}

#[derive(Debug, Clone)]
enum Op {
    Send { partition: usize, records: u8 },
    Ack(Index),
    RefuseRecord(Index),
    LosePosition(Index),
    QueueFull(bool),
    FailNextWrite,
    FailNextCommit,
    SlowCommit(u8),
    SlowAbort(u8),
    WriterResult(u8),
    Fence,
    Stop,
    Wait(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..PARTITIONS, 1u8..6).prop_map(|(partition, records)| Op::Send { partition, records }),
        6 => any::<Index>().prop_map(Op::Ack),
        1 => any::<Index>().prop_map(Op::RefuseRecord),
        1 => any::<Index>().prop_map(Op::LosePosition),
        1 => any::<bool>().prop_map(Op::QueueFull),
        1 => Just(Op::FailNextWrite),
        1 => Just(Op::FailNextCommit),
        1 => (0u8..4).prop_map(Op::SlowCommit),
        1 => (0u8..4).prop_map(Op::SlowAbort),
        2 => (0u8..3).prop_map(Op::WriterResult),
        1 => Just(Op::Fence),
        1 => Just(Op::Stop),
        3 => (0u16..300).prop_map(Op::Wait),
    ]
}

/// Plays `ops` as the produce stage would, then stops the flow and drains it against a target
/// that answers everything; checks the invariants throughout.
fn play(mode: Mode, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut now = Instant::now();
    let mut world = World::new(mode);
    let mut commit = Commit::new(mode, INTERVAL, now);
    let mut stopped = false;
    let mut finished = false;
    for op in ops {
        match op {
            Op::Send { partition, records } if !stopped && !world.refused() => {
                match io(&mut world, |io| commit.before_send(now, Duration::ZERO, io)) {
                    Ok(Gate::Go) => world.send(*partition as SlotId, *records),
                    Ok(Gate::Hold(_)) => {}
                    Err(why) => {
                        stopped = true;
                        world.failed();
                        finished = !commit.fail(why, now);
                    }
                }
            }
            Op::Send { .. } => {}
            Op::Ack(i) => world.answer(i.index(world.lane.in_flight.len().max(1)), true),
            Op::RefuseRecord(i) => world.answer_kind(*i, true, false),
            Op::LosePosition(i) => world.answer_kind(*i, false, false),
            Op::QueueFull(full) => world.lane.queue_full = *full,
            Op::FailNextWrite => world.lane.fail_next_write = true,
            Op::FailNextCommit => world.lane.fail_next_commit = true,
            Op::SlowCommit(n) => world.lane.commit_pending = u32::from(*n),
            Op::SlowAbort(n) => world.lane.abort_pending = u32::from(*n),
            Op::WriterResult(k) => {
                world.writer.result = Some(match k {
                    0 => Outcome::Committed,
                    1 => Outcome::Failed("the group refused".into()),
                    _ => Outcome::Broken("the producer failed".into()),
                })
            }
            Op::Fence => world.fence(),
            Op::Stop if !stopped => {
                commit.stop(now, now + Duration::from_secs(5));
                stopped = true;
            }
            Op::Stop => {}
            Op::Wait(ms) => now += Duration::from_millis(u64::from(*ms)),
        }
        if !stopped {
            // The rest of the stage's step: a refusal parks the flow; otherwise the strategy
            // commits or flushes what came due.
            if world.refused() {
                commit.stop(now, now + Duration::from_secs(5));
                stopped = true;
            } else if let Err(why) = io(&mut world, |io| {
                commit.before_send(now, Duration::ZERO, io)?;
                commit.after_send(now, io)
            }) {
                stopped = true;
                world.failed();
                finished = !commit.fail(why, now);
            }
        } else if !finished {
            finished = io(&mut world, |io| commit.drain(now, Duration::ZERO, io)) == Progress::Finished;
        }
        world.check_positions()?;
    }
    // The end of the history: the flow stops, against a target that now answers everything.
    if !stopped {
        commit.stop(now, now + Duration::from_secs(5));
    }
    world.lane.queue_full = false;
    let mut steps = 0;
    while !finished {
        steps += 1;
        prop_assert!(steps < 10_000, "the drain never finished");
        while !world.lane.in_flight.is_empty() {
            world.answer(0, true);
        }
        if world.writer.batch.is_some() && world.writer.result.is_none() {
            world.writer.result = Some(Outcome::Committed);
        }
        finished = io(&mut world, |io| commit.drain(now, Duration::ZERO, io)) == Progress::Finished;
        now += Duration::from_millis(10);
        world.check_positions()?;
    }
    prop_assert!(!world.lane.open.iter().any(|open| *open), "finished with a transaction open: {:?}", world.lane.open);
    prop_assert!(world.wrong().is_empty(), "{:?}", world.wrong());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn at_least_once_never_stores_a_position_past_an_unacknowledged_record(ops in prop::collection::vec(op(), 0..120)) {
        play(Mode::AtLeastOnce, &ops)?;
    }

    #[test]
    fn fenced_writes_store_only_acknowledged_positions_and_nothing_once_fenced(ops in prop::collection::vec(op(), 0..120)) {
        play(Mode::Fenced, &ops)?;
    }

    #[test]
    fn exactly_once_stores_only_committed_positions_and_leaves_no_transaction_open(ops in prop::collection::vec(op(), 0..120)) {
        play(Mode::Transactional, &ops)?;
    }
}

/// The shapes the generated histories must reach, written out once each.
mod cases {
    use super::*;

    fn drain_to_end(world: &mut World, commit: &mut Commit, mut now: Instant) -> Instant {
        for _ in 0..10_000 {
            while !world.lane.in_flight.is_empty() {
                world.answer(0, true);
            }
            if io(world, |io| commit.drain(now, Duration::ZERO, io)) == Progress::Finished {
                return now;
            }
            now += Duration::from_millis(10);
        }
        panic!("the drain never finished");
    }

    fn send(world: &mut World, commit: &mut Commit, now: Instant, slot: SlotId, n: u8) {
        let gate = io(world, |io| commit.before_send(now, Duration::ZERO, io));
        assert_eq!(gate, Ok(Gate::Go));
        world.send(slot, n);
    }

    #[test]
    fn a_park_on_a_refused_record_aborts_the_open_transaction() {
        let now = Instant::now();
        let mut world = World::new(Mode::Transactional);
        let mut commit = Commit::new(Mode::Transactional, INTERVAL, now);
        send(&mut world, &mut commit, now, 0, 5);
        world.answer(0, true);
        world.answer(0, false);
        assert!(world.lane.open[0], "the records went out inside a transaction");
        commit.stop(now, now + Duration::from_secs(5));
        drain_to_end(&mut world, &mut commit, now);
        assert_eq!(world.lane.open, vec![false; PARTITIONS], "aborted");
        assert!(world.lane.stored.is_empty(), "nothing of the aborted transaction is stored");
        assert!(world.lane.durable.is_empty(), "nor readable");
    }

    #[test]
    fn a_clean_stop_commits_what_the_target_acknowledged() {
        let now = Instant::now();
        let mut world = World::new(Mode::Transactional);
        let mut commit = Commit::new(Mode::Transactional, INTERVAL, now);
        send(&mut world, &mut commit, now, 1, 3);
        commit.stop(now, now + Duration::from_secs(5));
        drain_to_end(&mut world, &mut commit, now);
        assert_eq!(world.lane.stored.get(&1), Some(&3), "the position after the three records is committed");
        assert_eq!(world.lane.open, vec![false; PARTITIONS]);
    }

    #[test]
    fn a_failed_commit_aborts_and_stores_nothing() {
        let mut now = Instant::now();
        let mut world = World::new(Mode::Transactional);
        let mut commit = Commit::new(Mode::Transactional, INTERVAL, now);
        send(&mut world, &mut commit, now, 0, 2);
        world.answer(0, true);
        world.answer(0, true);
        world.lane.fail_next_commit = true;
        now += INTERVAL;
        let mut result = Ok(Gate::Go);
        for _ in 0..4 {
            result = io(&mut world, |io| commit.before_send(now, Duration::ZERO, io));
            while !world.lane.in_flight.is_empty() {
                world.answer(0, true);
            }
            if result.is_err() {
                break;
            }
        }
        let why = result.expect_err("the refused commit stops the flow");
        assert!(why.contains("committing a transaction failed"), "{why}");
        assert!(commit.fail(why, now), "an abort follows");
        drain_to_end(&mut world, &mut commit, now);
        assert_eq!(world.lane.open, vec![false; PARTITIONS]);
        assert!(world.lane.stored.is_empty());
    }

    #[test]
    fn at_least_once_stores_only_the_acknowledged_prefix_when_acks_come_out_of_order() {
        let mut now = Instant::now();
        let mut world = World::new(Mode::AtLeastOnce);
        let mut commit = Commit::new(Mode::AtLeastOnce, INTERVAL, now);
        send(&mut world, &mut commit, now, 0, 4);
        // Records 0, 2 and 3 are acknowledged; 1 is not.
        world.answer(0, true);
        world.answer(1, true);
        world.answer(1, true);
        now += INTERVAL;
        io(&mut world, |io| commit.after_send(now, io)).expect("flush");
        while world.lane.in_flight.iter().any(|p| matches!(p, Pending::Position { .. })) {
            let at = world.lane.in_flight.iter().position(|p| matches!(p, Pending::Position { .. })).unwrap_or(0);
            world.answer(at, true);
        }
        assert_eq!(world.lane.stored.get(&0), Some(&1), "the position stops before the unacknowledged record 1");
    }
}
