//! Produce: writes batches to the target and advances each partition's position only over the
//! records the target acknowledged. Positions are written through the same producers as the
//! records, so in exactly-once mode they are committed in the same transaction as the records
//! they cover (see [`lanes`]).

mod delivery;
mod in_flight;
mod lanes;
mod positions;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header as KafkaHeader, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;

use super::batch::{Batch, Record};
use super::doorbell::Doorbell;
use super::lag::LAG_EVERY;
use super::pool::{FlowControl, StageTask, Step};
use super::{Slots, StageError};
use crate::cluster::ControlProducer;
use crate::events::{
    FlowRetrying, OffsetSyncsSent, PositionsStored, RecordRejected, TransactionsAborted, TransactionsCommitted,
};
use crate::offsets::mm2::OffsetSync;
use crate::offsets::store::{encode_key, encode_run_key, encode_run_value, encode_value, Stored};
use crate::offsets::{PositionWrite, SlotId, SourceOffset};

pub use delivery::{Deliveries, DeliveryContext};
pub use in_flight::{InFlight, Sent, Ticket, POSITION_TICKET};
pub use lanes::{transactional_id, Abort, Lanes, TargetProducer};
use positions::Outcome;
pub use positions::PositionWriter;

/// Everything the produce thread needs.
pub struct ProduceStage {
    /// `source->target`.
    pub flow: String,
    /// The target producers (idempotent, acks=all; transactional in exactly-once mode).
    pub lanes: Lanes,
    /// What they were told: the ledger of positions.
    pub deliveries: Arc<Deliveries>,
    /// From the transform stage.
    pub input: Receiver<Batch>,
    /// The transform stage's doorbell, rung on taking a batch: it may hold one for want of room.
    pub before: Doorbell,
    /// The flow's slot table.
    pub slots: Slots,
    /// Where positions are stored.
    pub positions_topic: String,
    /// How often positions are stored; in exactly-once mode, how often a transaction commits.
    pub flush_interval: Duration,
    /// The flow this stage belongs to: its stop flag and drain deadline.
    pub control: Arc<FlowControl>,
    /// Where offset syncs go, when `emit.offset-syncs.enabled`.
    pub offset_syncs: Option<OffsetSyncSink>,
    /// At-least-once in a group: writes positions in transactions fenced by the membership.
    pub position_writer: Option<PositionWriter>,
}

/// The producer and topic that receive a flow's offset syncs.
pub struct OffsetSyncSink {
    /// A producer on the cluster `offset-syncs.topic.location` names.
    pub producer: ControlProducer,
    /// `mm2-offset-syncs.<alias>.internal`.
    pub topic: String,
}

/// How long a just-created remote topic or partition may take to show in producer metadata.
const METADATA_WAIT: Duration = Duration::from_secs(60);

/// How often a topic missing from the producer's metadata is asked for again; each ask waits
/// briefly, since the thread may serve other flows (the answer fills the cache even if late).
const METADATA_ASK_EVERY: Duration = Duration::from_millis(500);
const METADATA_ASK_WAIT: Duration = Duration::from_millis(50);

/// How long the produce stage waits for a batch before serving acknowledgements again.
const RECV_WAIT: Duration = Duration::from_millis(50);

/// How long one step waits on a commit; librdkafka carries it on in the background.
const COMMIT_WAIT: Duration = Duration::from_millis(10);

/// The produce stage as a pool task.
pub struct ProduceTask {
    stage: ProduceStage,
    /// A batch partly handed to the producer (its queue was full).
    sending: Option<Sending>,
    last_store: Instant,
    /// Position records not yet taken by their producer (its queue was full), oldest first,
    /// with the lane that writes them.
    unstored: VecDeque<(usize, Vec<u8>, Option<Vec<u8>>)>,
    /// Slots whose stored state the ledger has been told about.
    known_slots: usize,
    /// Set once the flow is stopping: what is left to do before the stage ends.
    draining: Option<Drain>,
    /// When a just-created topic's metadata was last asked for.
    metadata_asked: Option<Instant>,
    /// Exactly-once: where the open transaction stands.
    transaction: Transaction,
    /// When the positions were last published for the lag.
    positions_published: Instant,
    /// Position writes handed to a producer but not yet known to be stored (committed, in a
    /// transactional mode): counted once they are.
    unconfirmed: Unconfirmed,
    /// Exactly-once: why a stopping stage's open transaction cannot commit.
    cannot_commit: Option<String>,
    /// Exactly-once: set once a stopping stage aborts what it could not commit.
    aborting: Option<Aborting>,
}

/// Counts of position writes not yet confirmed.
#[derive(Default)]
struct Unconfirmed {
    partitions: usize,
    runs: usize,
    mapping_bytes: usize,
}

/// Exactly-once: the open transaction of every lane.
#[derive(Default)]
struct Transaction {
    /// When the open transactions began; `None` before the first.
    began: Option<Instant>,
    /// Set while committing: no record is sent until the commit is done.
    committing: Option<Commit>,
    /// A position record of the open transaction could not be handed to its producer: the
    /// transaction must not commit.
    unwritable: Option<String>,
}

/// A commit under way: first every record is acknowledged, then the positions they reach are
/// written into the same transactions and acknowledged, then each lane commits.
struct Commit {
    started: Instant,
    positions_queued: bool,
}

/// Why the produce stage cannot go on.
enum Halt {
    /// The target refused a record; what it acknowledged before is stored.
    Refused,
    /// A transaction could not go on; nothing of it is stored.
    Failed(StageError),
}

/// A stopping produce stage: it waits for acknowledgements until `records_until`, stores the
/// positions they reached, and waits for those until `positions_until`.
struct Drain {
    records_until: Instant,
    positions_until: Instant,
    positions_queued: bool,
}

/// How long a stage that stops with no deadline set (its input closed) drains.
const DEFAULT_DRAIN: Duration = Duration::from_secs(5);

/// A batch being handed to the producer, and how far it got.
struct Sending {
    batch: Batch,
    /// Per record, its ticket and the index of its destination; `None` for a record of a
    /// partition no longer replicated.
    tickets: Vec<Option<(Ticket, usize)>>,
    next: usize,
    /// Per slot of the batch: the remote topic, the partition and the lane.
    destinations: Vec<(SlotId, Arc<str>, i32, usize)>,
    metadata_deadline: Option<Instant>,
}

/// How long a stopping exactly-once flow tries to abort its open transactions: long enough
/// for a reachable coordinator; a frozen one leaves them to `transaction.timeout.ms`.
const ABORT_WAIT: Duration = Duration::from_secs(5);

/// Exactly-once: a stopping stage aborting the transactions it could not commit.
struct Aborting {
    /// Why they could not commit.
    why: String,
    until: Instant,
}

impl StageTask for ProduceTask {
    fn step(&mut self, wait: Duration) -> Result<Step, StageError> {
        if self.aborting.is_some() {
            return Ok(self.abort_step(wait));
        }
        let step = self.replicate_step(wait);
        // An exactly-once stage never ends with a transaction open: every `read_committed`
        // reader of its partitions, and of the position topic, would wait out its timeout.
        if !self.stage.lanes.transactional_mode()
            || self.transaction.began.is_none()
            || matches!(step, Ok(Step::Worked | Step::Idle))
        {
            return step;
        }
        let why = match step {
            Err(e) => {
                let why = e.to_string();
                self.stage.control.fail(e);
                why
            }
            Ok(_) => self.cannot_commit.take().unwrap_or_else(|| "the flow stopped".into()),
        };
        self.aborting = Some(Aborting { why, until: Instant::now() + ABORT_WAIT });
        Ok(Step::Worked)
    }

    fn polling(&self) -> bool {
        // Acknowledgements come only when polled for, and a stopping stage drains on deadlines;
        // a transaction (exactly-once) is committed on a timer.
        self.sending.is_some()
            || self.draining.is_some()
            || !self.unstored.is_empty()
            || self.stage.lanes.transactional_mode()
            || self.stage.lanes.in_flight() > 0
            || self.stage.position_writer.as_ref().is_some_and(PositionWriter::busy)
    }
}

impl ProduceTask {
    /// Moves records on, or drains a stopping stage.
    fn replicate_step(&mut self, wait: Duration) -> Result<Step, StageError> {
        if self.positions_published.elapsed() >= LAG_EVERY {
            self.positions_published = Instant::now();
            self.stage.publish_positions();
        }
        if self.draining.is_none() {
            match self.advance(wait) {
                Ok(Step::Finished) => self.begin_drain(),
                Ok(step) => return Ok(step),
                Err(Halt::Refused) => {
                    // A refusal stops the flow; what the target acknowledged is stored first.
                    self.stage.control.fail(self.stage.refusal_error());
                    self.begin_drain();
                }
                Err(Halt::Failed(e)) => return Err(e),
            }
        }
        self.drain_step(wait)
    }

    /// Exactly-once: one step of aborting the open transactions; never waits longer than `wait`.
    fn abort_step(&mut self, wait: Duration) -> Step {
        let Some(aborting) = &self.aborting else { return Step::Finished };
        let failure = match self.stage.lanes.abort(wait.min(COMMIT_WAIT)) {
            Abort::Pending if Instant::now() < aborting.until => return Step::Idle,
            Abort::Pending => Some(format!("the coordinator did not answer within {ABORT_WAIT:?}")),
            Abort::Done => None,
            Abort::Failed(failure) => Some(failure),
        };
        TransactionsAborted { flow: &self.stage.flow, why: &aborting.why, failure: failure.as_deref() }.emit();
        self.aborting = None;
        self.transaction = Transaction::default();
        Step::Finished
    }

    /// Moves one batch on.
    fn advance(&mut self, wait: Duration) -> Result<Step, Halt> {
        if self.stage.deliveries.state().ledger.refusal().is_some() {
            return Err(Halt::Refused);
        }
        // A stopping flow sends nothing new: records of a batch not yet handed over were never
        // acknowledged, so no position passes them.
        if self.stage.control.stopping() {
            return Ok(Step::Finished);
        }
        if self.stage.lanes.transactional_mode() {
            let began = match self.transaction.began {
                Some(at) => at,
                None => {
                    self.stage
                        .lanes
                        .begin()
                        .map_err(|e| Halt::Failed(self.stage.transaction_error("beginning a transaction", e)))?;
                    *self.transaction.began.insert(Instant::now())
                }
            };
            if self.transaction.committing.is_none() && began.elapsed() >= self.stage.flush_interval {
                self.transaction.committing = Some(Commit { started: Instant::now(), positions_queued: false });
            }
            if self.transaction.committing.is_some() {
                return self.commit_step(wait);
            }
        }
        let mut worked = false;
        if self.sending.is_none() {
            match self.stage.input.recv_timeout(wait.min(RECV_WAIT)) {
                Ok(batch) => {
                    self.stage.before.ring();
                    self.sending = Some(self.stage.begin(batch).map_err(Halt::Failed)?);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Ok(Step::Finished),
            }
        }
        if let Some(sending) = self.sending.as_mut() {
            match self.stage.send_from(sending, wait, &mut self.metadata_asked) {
                Ok(true) => {
                    if let Some(done) = self.sending.take() {
                        self.stage.complete(&done.batch);
                    }
                    worked = true;
                }
                Ok(false) => {}
                Err(refused) => {
                    let mut state = self.stage.deliveries.state();
                    let first = state.ledger.refusal().is_none();
                    state.ledger.refused(refused.0.slot, SourceOffset(refused.0.offset), refused.0.reason);
                    if first && state.ledger.refusal().is_some() {
                        state.refused_code = refused.1;
                    }
                    return Err(Halt::Refused);
                }
            }
        }
        self.stage.poll(Duration::ZERO);
        self.stage.count_acks();
        if !self.stage.lanes.transactional_mode() {
            self.stage.emit_offset_syncs();
            self.writer_outcome(Duration::ZERO).map_err(Halt::Failed)?;
            if self.last_store.elapsed() >= self.stage.flush_interval {
                self.store_positions();
                self.last_store = Instant::now();
            }
        }
        Ok(if worked { Step::Worked } else { Step::Idle })
    }

    /// At-least-once: takes in what became of the last position transaction, waiting at most
    /// `wait`; `true` while it is still being written. Refused positions (the group moved this
    /// process's tasks on, say) are written again at the next flush if this process still owns
    /// them.
    fn writer_outcome(&mut self, wait: Duration) -> Result<bool, StageError> {
        let Some(writer) = self.stage.position_writer.as_mut() else { return Ok(false) };
        match writer.outcome(wait) {
            Outcome::Pending => Ok(true),
            Outcome::Idle => Ok(false),
            Outcome::Committed => {
                self.stored();
                Ok(false)
            }
            Outcome::Failed(e) => {
                self.unconfirmed = Unconfirmed::default();
                FlowRetrying {
                    flow: &self.stage.flow,
                    what: &format!("positions not stored ({e}); they are written again while this process owns them"),
                }
                .emit();
                self.stage.deliveries.state().ledger.write_failed();
                Ok(false)
            }
            Outcome::Broken(e) => {
                self.stage.deliveries.state().ledger.write_failed();
                Err(StageError::Transaction {
                    flow: self.stage.flow.clone(),
                    what: format!("the position writer failed ({e})"),
                })
            }
        }
    }

    /// One step of a commit; never waits longer than `wait`, so the other flows on the thread go on.
    fn commit_step(&mut self, wait: Duration) -> Result<Step, Halt> {
        self.stage.poll(wait.min(COMMIT_WAIT));
        self.stage.count_acks();
        if self.stage.lanes.in_flight() > 0 || !self.send_unstored() {
            return Ok(Step::Idle);
        }
        if let Some(e) = &self.transaction.unwritable {
            return Err(Halt::Failed(StageError::Transaction {
                flow: self.stage.flow.clone(),
                what: format!("a position write failed ({e})"),
            }));
        }
        let Some(commit) = self.transaction.committing.as_mut() else { return Ok(Step::Idle) };
        if !commit.positions_queued {
            commit.positions_queued = true;
            self.store_positions();
            return Ok(Step::Worked);
        }
        match self.stage.lanes.commit(wait.min(COMMIT_WAIT)) {
            Ok(false) => return Ok(Step::Idle),
            Ok(true) => {}
            Err(e) => return Err(Halt::Failed(self.stage.transaction_error("committing a transaction", e))),
        }
        let took = commit.started.elapsed();
        TransactionsCommitted { flow: &self.stage.flow, took }.emit();
        self.stored();
        // Only now are the records the syncs point at readable on the target.
        self.stage.emit_offset_syncs();
        self.transaction = Transaction::default();
        Ok(Step::Worked)
    }

    fn begin_drain(&mut self) {
        let deadline = self.stage.control.deadline().unwrap_or_else(|| Instant::now() + DEFAULT_DRAIN);
        let now = Instant::now();
        // Most of the time goes to acknowledgements; the rest to storing the positions they reach.
        let window = deadline.saturating_duration_since(now);
        self.draining = Some(Drain {
            records_until: now + window.mul_f32(0.7),
            positions_until: deadline,
            positions_queued: false,
        });
        self.sending = None;
    }

    /// One step of draining: never blocks longer than `wait`, so a stopping flow whose target is
    /// frozen holds up no other flow on the thread.
    fn drain_step(&mut self, wait: Duration) -> Result<Step, StageError> {
        self.stage.poll(wait.min(Duration::from_millis(10)));
        self.stage.count_acks();
        let now = Instant::now();
        let transactional = self.stage.lanes.transactional_mode();
        // A position transaction under way ends first: the last positions go in a new one.
        if self.draining.as_ref().is_some_and(|d| !d.positions_queued && now < d.positions_until) {
            match self.writer_outcome(wait.min(COMMIT_WAIT)) {
                Ok(true) => return Ok(Step::Idle),
                Ok(false) => {}
                Err(e) => {
                    FlowRetrying { flow: &self.stage.flow, what: &format!("stopping without storing positions: {e}") }
                        .emit();
                    return Ok(Step::Finished);
                }
            }
        }
        let Some(drain) = self.draining.as_mut() else { return Ok(Step::Finished) };
        // librdkafka's count leaves out records already refused, which will never be acknowledged.
        let in_flight = self.stage.lanes.in_flight();
        if !drain.positions_queued {
            if in_flight > 0 && now < drain.records_until {
                return Ok(Step::Idle);
            }
            drain.positions_queued = true;
            if transactional {
                // A transaction with a record missing, or one that never began, must not commit.
                let refused = self.stage.deliveries.state().ledger.refusal().is_some();
                if in_flight > 0 || refused || self.transaction.began.is_none() {
                    self.cannot_commit = Some(if refused {
                        "stopping on a record the target refused".into()
                    } else {
                        "stopping before the target acknowledged the transaction's records".into()
                    });
                    return Ok(Step::Finished);
                }
            } else {
                self.stage.emit_offset_syncs();
            }
            self.store_positions();
        }
        let writing = match self.writer_outcome(wait.min(COMMIT_WAIT)) {
            Ok(writing) => writing,
            Err(e) => {
                FlowRetrying { flow: &self.stage.flow, what: &format!("stopping without storing positions: {e}") }
                    .emit();
                return Ok(Step::Finished);
            }
        };
        let stored = self.send_unstored() && self.stage.lanes.in_flight() == 0 && !writing;
        if transactional && self.transaction.unwritable.is_some() {
            self.cannot_commit = Some("stopping with a transaction that lost a position write".into());
            return Ok(Step::Finished);
        }
        let done = stored
            && (!transactional
                || match self.stage.lanes.commit(wait.min(COMMIT_WAIT)) {
                    Ok(committed) => committed,
                    Err(e) => {
                        self.cannot_commit = Some(format!("the last transaction did not commit ({e})"));
                        return Ok(Step::Finished);
                    }
                });
        let Some(drain) = self.draining.as_ref() else { return Ok(Step::Finished) };
        if !done && now < drain.positions_until {
            return Ok(Step::Idle);
        }
        if !done && transactional {
            self.cannot_commit = Some("stopping before the last transaction committed".into());
        } else if !done {
            FlowRetrying { flow: &self.stage.flow, what: "stopping before the target acknowledged everything; positions cover only what it did, a restart re-sends the rest" }.emit();
        }
        if transactional && done {
            self.stored();
            self.stage.emit_offset_syncs();
            self.transaction = Transaction::default();
        }
        if let Some(sink) = &self.stage.offset_syncs {
            let _ = sink.producer.flush(Duration::ZERO);
        }
        Ok(Step::Finished)
    }

    /// Tells the ledger about slots discovery added or retired since the last call.
    fn sync_slots(&mut self) {
        let slots = self.stage.slots.read();
        let mut state = self.stage.deliveries.state();
        for (id, slot) in slots.iter().enumerate().skip(self.known_slots) {
            state.ledger.resume(id as SlotId, slot.resume_run);
            if let Some(start) = slot.start_at {
                state.ledger.start_at(id as SlotId, SourceOffset(start));
            }
        }
        self.known_slots = slots.len();
        for (id, slot) in slots.iter().enumerate() {
            if slot.retired {
                state.ledger.retire(id as SlotId);
            }
        }
    }

    /// Queues what the ledger says must be stored, and hands the producers as much as they take.
    /// Never waits: a full queue keeps the rest for the next step.
    fn store_positions(&mut self) {
        self.sync_slots();
        // New writes only once the old ones are out, so the order (closed runs before the
        // position that follows them) holds and the queue stays small.
        if self.unstored.is_empty() {
            // One position transaction at a time: the next takes what the ledger has then.
            if self.stage.position_writer.as_ref().is_some_and(PositionWriter::busy) {
                return;
            }
            let writes = self.stage.deliveries.state().ledger.take_writes();
            if !writes.is_empty() {
                let slots = self.stage.slots.read();
                let lanes = &self.stage.lanes;
                let (mut partitions, mut runs, mut mapping_bytes) = (0, 0, 0);
                for write in writes {
                    let record = match write {
                        PositionWrite::ClosedRun { slot, run } => slots.get(slot as usize).map(|s| {
                            runs += 1;
                            let r = (
                                s.partition,
                                encode_run_key(&s.source_topic, s.partition, run.upstream),
                                Some(encode_run_value(run)),
                            );
                            mapping_bytes += r.1.len() + r.2.as_ref().map_or(0, Vec::len);
                            r
                        }),
                        PositionWrite::Position { slot, next, open } => slots.get(slot as usize).map(|s| {
                            partitions += 1;
                            // The open run adds three INT64s to a record written anyway.
                            mapping_bytes += if open.is_some() { 24 } else { 0 };
                            (
                                s.partition,
                                encode_key(&s.source_topic, s.partition),
                                Some(encode_value(Stored { next: next.0, open })),
                            )
                        }),
                        PositionWrite::Forget { slot } => slots
                            .get(slot as usize)
                            .map(|s| (s.partition, encode_key(&s.source_topic, s.partition), None)),
                    };
                    // A position goes with the records it covers: through their lane.
                    self.unstored.extend(
                        record.and_then(|(partition, key, value)| Some((lanes.lane_of(partition)?, key, value))),
                    );
                }
                drop(slots);
                self.unconfirmed.partitions += partitions;
                self.unconfirmed.runs += runs;
                self.unconfirmed.mapping_bytes += mapping_bytes;
                if let Some(writer) = self.stage.position_writer.as_mut() {
                    let batch = self.unstored.drain(..).map(|(_, key, value)| (key, value)).collect();
                    if !writer.hand_over(batch) {
                        self.stage.deliveries.state().ledger.write_failed();
                    }
                } else if !self.stage.lanes.transactional_mode() {
                    self.stored();
                }
            }
        }
        self.send_unstored();
    }

    /// Counts the position writes just confirmed stored.
    fn stored(&mut self) {
        let u = std::mem::take(&mut self.unconfirmed);
        if u.partitions + u.runs > 0 {
            PositionsStored {
                flow: &self.stage.flow,
                partitions: u.partitions,
                runs: u.runs,
                mapping_bytes: u.mapping_bytes,
            }
            .emit();
        }
    }

    /// Hands queued position writes to their producers; `true` once none is left.
    fn send_unstored(&mut self) -> bool {
        while let Some((lane, key, value)) = self.unstored.front() {
            let mut record = BaseRecord::with_opaque_to(&self.stage.positions_topic, POSITION_TICKET).key(&key[..]);
            if let Some(v) = value {
                record = record.payload(&v[..]);
            }
            match self.stage.lanes.producer(*lane).send(record) {
                Ok(()) => {
                    self.unstored.pop_front();
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => return false,
                Err((e, _)) if self.stage.lanes.transactional_mode() => {
                    // The transaction must not commit records without the positions they reach.
                    self.transaction.unwritable.get_or_insert_with(|| e.to_string());
                    self.unstored.clear();
                    return true;
                }
                Err((e, _)) => {
                    FlowRetrying {
                        flow: &self.stage.flow,
                        what: &format!("a position write failed ({e}); rewriting positions"),
                    }
                    .emit();
                    self.unstored.clear();
                    self.stage.deliveries.state().ledger.write_failed();
                    return true;
                }
            }
        }
        true
    }
}

/// A record the producer would not take.
struct Refused {
    slot: SlotId,
    offset: i64,
    reason: String,
}

impl ProduceStage {
    /// The stage as a pool task.
    pub fn task(self) -> ProduceTask {
        ProduceTask {
            stage: self,
            sending: None,
            last_store: Instant::now(),
            unstored: VecDeque::new(),
            known_slots: 0,
            draining: None,
            metadata_asked: None,
            transaction: Transaction::default(),
            positions_published: Instant::now(),
            unconfirmed: Unconfirmed::default(),
            cannot_commit: None,
            aborting: None,
        }
    }

    /// Serves delivery reports for up to `timeout`.
    fn poll(&self, timeout: Duration) {
        self.lanes.poll(timeout);
        self.deliveries.state().round_clock_ms = None;
    }

    /// Hands the acknowledgements counted since the last call to the partition metrics.
    fn count_acks(&self) {
        let rounds = self.deliveries.state().acks.take();
        if rounds.is_empty() {
            return;
        }
        let slots = self.slots.read();
        for (slot, round) in rounds {
            if let Some(s) = slots.get(slot as usize) {
                s.metrics.acked(&round);
            }
        }
    }

    /// Hands every slot's position (the next offset to deliver) to its metric handles, where the
    /// fetch stage reads it for the lag.
    fn publish_positions(&self) {
        let slots = self.slots.read();
        let state = self.deliveries.state();
        for (id, slot) in slots.iter().enumerate() {
            if let Some(next) = state.ledger.position(id as SlotId) {
                slot.metrics.set_delivered(next.0);
            }
        }
    }

    /// Marks a batch's records as sent, looks up where each of its partitions goes and issues
    /// a ticket to each record that goes somewhere.
    fn begin(&self, batch: Batch) -> Result<Sending, StageError> {
        // Read before sending: `send` may poll, the delivery callback reads the slot table
        // too, and a recursive read behind a waiting writer (discovery adding slots) would
        // deadlock.
        let mut destinations = Vec::with_capacity(batch.fetched_through.len());
        {
            let slots = self.slots.read();
            for &(id, _) in &batch.fetched_through {
                let Some(s) = slots.get(id as usize) else { continue };
                // Only partitions of owned tasks are assigned; a record of another task would
                // be written unfenced, so it stops the flow rather than go out.
                let lane = self.lanes.lane_of(s.partition).ok_or_else(|| StageError::Thread {
                    flow: self.flow.clone(),
                    stage: "produce",
                    what: format!("got {}-{} of a task this process does not own", s.source_topic, s.partition),
                })?;
                destinations.push((id, s.remote_topic.clone(), s.partition, lane));
            }
        }
        let mut tickets = Vec::with_capacity(batch.records.len());
        {
            let mut state = self.deliveries.state();
            for r in &batch.records {
                state.ledger.sent(r.slot, SourceOffset(r.offset));
                let ticket = destinations.iter().position(|(id, ..)| *id == r.slot).map(|d| {
                    (
                        state.in_flight.issue(Sent {
                            slot: r.slot,
                            offset: r.offset,
                            timestamp: r.timestamp,
                            bytes: batch.size(r),
                            routed: r.route.is_some(),
                        }),
                        d,
                    )
                });
                tickets.push(ticket);
            }
        }
        Ok(Sending { batch, tickets, next: 0, destinations, metadata_deadline: None })
    }

    /// Hands the rest of a batch to the producer; `false` when its queue is full (that is the
    /// back-pressure) or a just-created topic is not in its metadata yet, to resume later.
    fn send_from(
        &self,
        s: &mut Sending,
        wait: Duration,
        metadata_asked: &mut Option<Instant>,
    ) -> Result<bool, (Refused, Option<RDKafkaErrorCode>)> {
        while let Some(record) = s.batch.records.get(s.next) {
            let Some(&Some((ticket, d))) = s.tickets.get(s.next) else {
                s.next += 1;
                continue;
            };
            let Some((_, remote_topic, partition, lane)) = s.destinations.get(d) else {
                s.next += 1;
                continue;
            };
            // A routed record leaves the partition to the target's partitioner: the route's
            // partition count is not the source's.
            let out = match &record.route {
                Some(topic) => to_kafka(&s.batch, record, topic, None, ticket),
                None => to_kafka(&s.batch, record, remote_topic, Some(*partition), ticket),
            };
            let refused = |reason: String, code| (Refused { slot: record.slot, offset: record.offset, reason }, code);
            let producer = self.lanes.producer(*lane);
            match producer.send(out) {
                Ok(()) => s.next += 1,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    self.poll(wait.min(Duration::from_millis(20)));
                    return Ok(false);
                }
                Err((
                    KafkaError::MessageProduction(
                        code @ (RDKafkaErrorCode::UnknownPartition | RDKafkaErrorCode::UnknownTopic),
                    ),
                    back,
                )) => {
                    if *s.metadata_deadline.get_or_insert_with(|| Instant::now() + METADATA_WAIT) <= Instant::now() {
                        self.deliveries.state().in_flight.settle(ticket);
                        return Err(refused(
                            format!("{} is not in the producer's metadata ({code})", back.topic),
                            Some(code),
                        ));
                    }
                    // A metadata request refreshes librdkafka's cache for this topic.
                    if metadata_asked.is_none_or(|at| at.elapsed() >= METADATA_ASK_EVERY) {
                        *metadata_asked = Some(Instant::now());
                        if producer.client().fetch_metadata(Some(back.topic), METADATA_ASK_WAIT).is_err() {
                            FlowRetrying {
                                flow: &self.flow,
                                what: &format!("waiting for {} metadata ({code})", back.topic),
                            }
                            .emit();
                        }
                    }
                    self.poll(wait.min(Duration::from_millis(100)));
                    return Ok(false);
                }
                Err((e, _)) => {
                    self.deliveries.state().in_flight.settle(ticket);
                    return Err(refused(e.to_string(), e.rdkafka_error_code()));
                }
            }
        }
        Ok(true)
    }

    /// Records of a fully sent batch that a stage dropped still move their partitions on.
    fn complete(&self, batch: &Batch) {
        let mut state = self.deliveries.state();
        for &(slot, through) in &batch.fetched_through {
            state.ledger.skipped_through(slot, SourceOffset(through));
        }
    }

    /// Writes the offset syncs that came due since the last call (MM2's layout; the source
    /// topic-partition is the key).
    fn emit_offset_syncs(&self) {
        let Some(sink) = &self.offset_syncs else { return };
        let due: Vec<(SlotId, OffsetSync)> = self.deliveries.state().ledger.take_syncs();
        if due.is_empty() {
            return;
        }
        let slots = self.slots.read();
        let (mut sent, mut bytes) = (0, 0);
        for (slot, sync) in due {
            let Some(s) = slots.get(slot as usize) else { continue };
            let key = OffsetSync::encode_key(&s.source_topic, s.partition);
            let value = sync.encode_value();
            sent += 1;
            bytes += key.len() + value.len();
            // A lost sync only makes translation coarser; it never loses data, so a full queue
            // drops it rather than stalling replication.
            if let Err((e, _)) = sink.producer.send(BaseRecord::to(&sink.topic).key(&key[..]).payload(&value[..])) {
                FlowRetrying { flow: &self.flow, what: &format!("offset sync to {} not sent: {e}", sink.topic) }.emit();
            }
        }
        OffsetSyncsSent { flow: &self.flow, syncs: sent, bytes }.emit();
    }

    /// The error for a transaction that cannot go on.
    fn transaction_error(&self, what: &str, e: KafkaError) -> StageError {
        let hint = match &e {
            KafkaError::Transaction(t) if t.code() == RDKafkaErrorCode::TransactionalIdAuthorizationFailed => {
                " (grant strait WRITE and DESCRIBE on the transactional id prefix `strait.` on the target)"
            }
            _ => "",
        };
        StageError::Transaction { flow: self.flow.clone(), what: format!("{what} failed: {e}{hint}") }
    }

    /// The error for the first record the target refused.
    fn refusal_error(&self) -> StageError {
        let (r, code) = {
            let state = self.deliveries.state();
            match state.ledger.refusal() {
                Some(r) => (r.clone(), state.refused_code),
                None => {
                    return StageError::Thread {
                        flow: self.flow.clone(),
                        stage: "produce",
                        what: "stopped on a refusal it could not report".into(),
                    };
                }
            }
        };
        let slots = self.slots.read();
        let (topic, partition, remote) = slots
            .get(r.slot as usize)
            .map(|s| (s.source_topic.to_string(), s.partition, s.remote_topic.to_string()))
            .unwrap_or_default();
        RecordRejected { flow: &self.flow, topic: &topic, partition, offset: r.offset.0, reason: &r.reason }.emit();
        let permanent = matches!(
            code,
            Some(
                RDKafkaErrorCode::MessageSizeTooLarge
                    | RDKafkaErrorCode::InvalidRecord
                    | RDKafkaErrorCode::TopicAuthorizationFailed
            )
        );
        if self.lanes.transactional_mode() && !permanent {
            // A timed-out or fenced write aborts the transaction; the restart resumes at the
            // last commit, so nothing is lost or written twice.
            return StageError::Transaction {
                flow: self.flow.clone(),
                what: format!("{topic}-{partition} offset {} was not written: {}", r.offset.0, r.reason),
            };
        }
        let hint = match code {
            Some(RDKafkaErrorCode::MessageSizeTooLarge) | Some(RDKafkaErrorCode::InvalidRecord) => format!(
                "raise the target producer's `message.max.bytes` (`<target>.producer.message.max.bytes`) and the `max.message.bytes` of `{remote}` on the target"
            ),
            Some(RDKafkaErrorCode::TopicAuthorizationFailed) => format!("grant strait WRITE on `{remote}` on the target"),
            _ => "fix the cause and restart strait; it resumes at this record".to_string(),
        };
        StageError::Rejected { flow: self.flow.clone(), topic, partition, offset: r.offset.0, reason: r.reason, hint }
    }
}

fn to_kafka<'a>(
    batch: &'a Batch,
    record: &Record,
    topic: &'a str,
    partition: Option<i32>,
    ticket: Ticket,
) -> BaseRecord<'a, [u8], [u8], Ticket> {
    let mut out = BaseRecord::with_opaque_to(topic, ticket).timestamp(record.timestamp);
    if let Some(p) = partition {
        out = out.partition(p);
    }
    if let Some(k) = batch.key(record) {
        out = out.key(k);
    }
    if let Some(v) = batch.value(record) {
        out = out.payload(v);
    }
    if record.headers.len > 0 {
        let mut headers = OwnedHeaders::new();
        for (key, value) in batch.headers(record) {
            // Keys came from Kafka as strings, or were checked when a policy edited them.
            headers = headers.insert(KafkaHeader { key: std::str::from_utf8(key).unwrap_or_default(), value });
        }
        out = out.headers(headers);
    }
    out
}
