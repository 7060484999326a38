//! Produce: writes batches to the target and takes the acknowledgements, which the ledger
//! turns into positions. When positions are stored and how transactions begin, commit and
//! abort is the flow's delivery strategy ([`crate::delivery::Commit`]); this stage drives it
//! over the flow's producers ([`lanes`]).

mod delivery;
mod in_flight;
mod io;
mod lanes;
mod positions;
mod target;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header as KafkaHeader, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;

use super::doorbell::Doorbell;
use super::lag::LAG_EVERY;
use super::pool::{FlowControl, StageTask, Step};
use super::{Slots, StageError};
use crate::cluster::{ControlProducer, TopicSpec};
use crate::config::SyncLocation;
use crate::delivery::{Commit, Gate, Mode, Progress};
use crate::events::{FlowRetrying, RecordRejected};
use crate::offsets::SourceOffset;
use crate::policy::ReplicationPolicy;
use crate::record::{Batch, Record, SlotId};
use crate::site::Site;

pub use delivery::{Deliveries, DeliveryContext};
pub use in_flight::{InFlight, Sent, Ticket, POSITION_TICKET};
pub use lanes::{transactional_id, Lanes, TargetProducer};
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

impl OffsetSyncSink {
    /// Where the flow's offset syncs go, when `emit.offset-syncs.enabled`: the topic `naming`
    /// gives (after the other cluster of the flow, as MM2 names it) is created, compacted, on
    /// the cluster `offset-syncs.topic.location` names.
    pub fn for_flow(site: &Site<'_>, naming: &dyn ReplicationPolicy) -> Result<Option<Self>, StageError> {
        let Some(cfg) = site.flow.offset_syncs else { return Ok(None) };
        let (cluster, settings, admin, named_after) = match cfg.location {
            SyncLocation::Source => (site.source, &site.flow.source_producer, &site.source_admin, &site.target.alias),
            SyncLocation::Target => (site.target, &site.flow.producer, &site.target_admin, &site.source.alias),
        };
        let topic = naming.offset_syncs_topic(named_after.as_str())?;
        admin.ensure_exists(&TopicSpec::compacted_single(topic.clone(), cfg.replication_factor))?;
        Ok(Some(Self { producer: site.producer(cluster, settings)?, topic }))
    }
}

/// How long a just-created remote topic or partition may take to show in producer metadata.
const METADATA_WAIT: Duration = Duration::from_secs(60);

/// How often a topic missing from the producer's metadata is asked for again; each ask waits
/// briefly, since the thread may serve other flows (the answer fills the cache even if late).
const METADATA_ASK_EVERY: Duration = Duration::from_millis(500);
const METADATA_ASK_WAIT: Duration = Duration::from_millis(50);

/// How long the produce stage waits for a batch before serving acknowledgements again.
const RECV_WAIT: Duration = Duration::from_millis(50);

/// How long a stage that stops with no deadline set (its input closed) drains.
const DEFAULT_DRAIN: Duration = Duration::from_secs(5);

/// The produce stage as a pool task.
pub struct ProduceTask {
    stage: ProduceStage,
    /// The flow's delivery strategy.
    commit: Commit,
    /// A batch partly handed to the producer (its queue was full).
    sending: Option<Sending>,
    /// Slots whose stored state the ledger has been told about.
    known_slots: usize,
    /// When a just-created topic's metadata was last asked for.
    metadata_asked: Option<Instant>,
    /// When the positions were last published for the lag.
    positions_published: Instant,
}

/// Why the produce stage cannot go on.
enum Halt {
    /// The target refused a record; what it acknowledged before is stored.
    Refused,
    /// The flow cannot go on; nothing more is stored.
    Failed(StageError),
}

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

impl StageTask for ProduceTask {
    fn step(&mut self, wait: Duration) -> Result<Step, StageError> {
        if self.positions_published.elapsed() >= LAG_EVERY {
            self.positions_published = Instant::now();
            self.stage.publish_positions();
        }
        if !self.commit.stopping() {
            match self.advance(wait) {
                Ok(Step::Finished) => self.begin_drain(),
                Ok(step) => return Ok(step),
                Err(Halt::Refused) => {
                    // A refusal stops the flow; what the target acknowledged is stored first.
                    self.stage.control.fail(self.stage.refusal_error());
                    self.begin_drain();
                }
                Err(Halt::Failed(e)) => {
                    // An exactly-once stage never ends with a transaction open: every
                    // `read_committed` reader of its partitions, and of the position topic,
                    // would wait out its timeout.
                    if !self.commit.fail(e.to_string(), Instant::now()) {
                        return Err(e);
                    }
                    self.stage.control.fail(e);
                    self.sending = None;
                }
            }
        }
        let progress =
            io::with(&mut self.stage, &mut self.known_slots, |io| self.commit.drain(Instant::now(), wait, io));
        Ok(match progress {
            Progress::Idle => Step::Idle,
            Progress::Worked => Step::Worked,
            Progress::Finished => {
                if let Some(sink) = &self.stage.offset_syncs {
                    let _ = sink.producer.flush(Duration::ZERO);
                }
                Step::Finished
            }
        })
    }

    fn polling(&self) -> bool {
        // Acknowledgements come only when polled for, a stopping stage drains on deadlines, and
        // a transaction (exactly-once) is committed on a timer.
        self.sending.is_some()
            || self.commit.busy()
            || self.stage.lanes.in_flight() > 0
            || self.stage.position_writer.as_ref().is_some_and(PositionWriter::busy)
    }
}

impl ProduceTask {
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
        let gate =
            io::with(&mut self.stage, &mut self.known_slots, |io| self.commit.before_send(Instant::now(), wait, io));
        match gate.map_err(|what| Halt::Failed(self.stage.transaction_error(what)))? {
            Gate::Go => {}
            Gate::Hold(worked) => return Ok(if worked { Step::Worked } else { Step::Idle }),
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
                    state.ledger.refused(refused.0.slot, refused.0.offset, refused.0.reason);
                    if first && state.ledger.refusal().is_some() {
                        state.refused_code = refused.1;
                    }
                    return Err(Halt::Refused);
                }
            }
        }
        let after = io::with(&mut self.stage, &mut self.known_slots, |io| {
            io.lane.poll(Duration::ZERO);
            self.commit.after_send(Instant::now(), io)
        });
        after.map_err(|what| Halt::Failed(self.stage.transaction_error(what)))?;
        Ok(if worked { Step::Worked } else { Step::Idle })
    }

    fn begin_drain(&mut self) {
        let now = Instant::now();
        let deadline = self.stage.control.deadline().unwrap_or_else(|| now + DEFAULT_DRAIN);
        self.commit.stop(now, deadline);
        self.sending = None;
    }
}

/// A record the producer would not take.
struct Refused {
    slot: SlotId,
    offset: SourceOffset,
    reason: String,
}

impl ProduceStage {
    /// The stage as a pool task.
    pub fn task(self) -> ProduceTask {
        let mode = if self.lanes.transactional_mode() {
            Mode::Transactional
        } else if self.position_writer.is_some() {
            Mode::Fenced
        } else {
            Mode::AtLeastOnce
        };
        ProduceTask {
            commit: Commit::new(mode, self.flush_interval, Instant::now()),
            stage: self,
            sending: None,
            known_slots: 0,
            metadata_asked: None,
            positions_published: Instant::now(),
        }
    }

    /// Serves delivery reports for up to `timeout`.
    fn poll(&self, timeout: Duration) {
        self.lanes.poll(timeout);
        self.deliveries.state().round_clock_ms = None;
    }

    /// Hands every slot's position (the next offset to deliver) to its metric handles, where the
    /// fetch stage reads it for the lag.
    fn publish_positions(&self) {
        let slots = self.slots.read();
        let state = self.deliveries.state();
        for (id, slot) in slots.iter().enumerate() {
            if let Some(next) = state.ledger.position(id as SlotId) {
                slot.metrics.set_delivered(next.get());
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
                state.ledger.sent(r.slot, r.offset);
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
            state.ledger.skipped_through(slot, through);
        }
    }

    /// The error for a transaction, or position write, that cannot go on.
    fn transaction_error(&self, what: String) -> StageError {
        StageError::Transaction { flow: self.flow.clone(), what }
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
        RecordRejected { flow: &self.flow, topic: &topic, partition, offset: r.offset.get(), reason: &r.reason }.emit();
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
                what: format!("{topic}-{partition} offset {} was not written: {}", r.offset, r.reason),
            };
        }
        let hint = match code {
            Some(RDKafkaErrorCode::MessageSizeTooLarge) | Some(RDKafkaErrorCode::InvalidRecord) => format!(
                "raise the target producer's `message.max.bytes` (`<target>.producer.message.max.bytes`) and the `max.message.bytes` of `{remote}` on the target"
            ),
            Some(RDKafkaErrorCode::TopicAuthorizationFailed) => format!("grant strait WRITE on `{remote}` on the target"),
            _ => "fix the cause and restart strait; it resumes at this record".to_string(),
        };
        StageError::Rejected { flow: self.flow.clone(), topic, partition, offset: r.offset, reason: r.reason, hint }
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
