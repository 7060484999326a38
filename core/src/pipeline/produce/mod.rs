//! Produce: writes batches to the target and advances each partition's position only over the
//! records the target acknowledged. Positions are written through the same producer, so an
//! exactly-once mode can later put them in the same transaction as the records they cover.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header as KafkaHeader, OwnedHeaders};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;

use super::batch::{Batch, Record};
use super::pool::{FlowControl, StageTask, Step};
use super::fetch::now_millis;
use super::{FlowError, Slots};
use crate::cluster::ControlProducer;
use crate::events::{AckRounds, FlowRetrying, OffsetSyncsSent, PositionsStored, RecordRejected};
use crate::offsets::store::{encode_key, encode_run_key, encode_run_value, encode_value, Stored};
use crate::offsets::mm2::OffsetSync;
use crate::offsets::{Ledger, PositionWrite, SlotId, SourceOffset, TargetOffset};

/// What a delivery report is about.
pub enum Delivery {
    /// A replicated record.
    Record {
        /// Its source partition.
        slot: SlotId,
        /// Its source offset.
        offset: i64,
        /// Its timestamp, for the latency measure.
        timestamp: i64,
        /// Its size, for the byte count.
        bytes: usize,
        /// Whether the policy routed it away from its remote topic (then it is no mirror and
        /// gets no offset sync).
        routed: bool,
    },
    /// A position record.
    Position,
}

#[derive(Default)]
struct DeliveryState {
    ledger: Ledger,
    /// The client's error code of the first refused record, for the hint in its error.
    refused_code: Option<RDKafkaErrorCode>,
    /// Acknowledgements not yet counted in the metrics.
    acks: AckRounds,
    /// The wall clock at the first acknowledgement of the current poll: a poll serves its
    /// reports in one burst, so one clock read serves them all (reading it per record was 1%
    /// of the process at 250,000 records/s).
    round_clock_ms: Option<i64>,
}

/// The producer's context: receives delivery reports on the produce thread.
pub struct DeliveryContext {
    state: Mutex<DeliveryState>,
}

impl DeliveryContext {
    /// A context for one flow; `offset_lag_max` turns on MM2's offset-sync rule.
    pub fn new(offset_lag_max: Option<i64>) -> Self {
        let state = DeliveryState { ledger: Ledger::new(offset_lag_max), ..DeliveryState::default() };
        Self { state: Mutex::new(state) }
    }

    fn state(&self) -> MutexGuard<'_, DeliveryState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<Delivery>;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: Self::DeliveryOpaque) {
        let mut state = self.state();
        match (*opaque, result) {
            (Delivery::Record { slot, offset, timestamp, bytes, routed }, Ok(message)) => {
                // A re-routed record is no mirror of its source offset: to the mapping it is a gap.
                let landed = (!routed).then(|| TargetOffset(message.offset()));
                state.ledger.acked(slot, SourceOffset(offset), landed);
                let now = *state.round_clock_ms.get_or_insert_with(now_millis);
                state.acks.add(slot, bytes, now - timestamp);
            }
            (Delivery::Record { slot, offset, .. }, Err((e, _))) => {
                let first = state.ledger.refusal().is_none();
                state.ledger.refused(slot, SourceOffset(offset), e.to_string());
                if first && state.ledger.refusal().is_some() {
                    state.refused_code = e.rdkafka_error_code();
                }
            }
            (Delivery::Position, Ok(_)) => {}
            (Delivery::Position, Err(_)) => state.ledger.write_failed(),
        }
    }
}

/// Everything the produce thread needs.
pub struct ProduceStage {
    /// `source->target`.
    pub flow: String,
    /// The target producer (idempotent, acks=all).
    pub producer: BaseProducer<DeliveryContext>,
    /// From the transform stage.
    pub input: Receiver<Batch>,
    /// The flow's slot table.
    pub slots: Slots,
    /// Where positions are stored.
    pub positions_topic: String,
    /// How often positions are stored.
    pub flush_interval: Duration,
    /// The flow this stage belongs to: its stop flag and drain deadline.
    pub control: Arc<FlowControl>,
    /// Where offset syncs go, when `emit.offset-syncs.enabled`.
    pub offset_syncs: Option<OffsetSyncSink>,
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

/// The produce stage as a pool task.
pub struct ProduceTask {
    stage: ProduceStage,
    /// A batch partly handed to the producer (its queue was full).
    sending: Option<Sending>,
    last_store: Instant,
    /// Position records not yet taken by the producer (its queue was full), oldest first.
    unstored: VecDeque<(Vec<u8>, Option<Vec<u8>>)>,
    /// Slots whose stored state the ledger has been told about.
    known_slots: usize,
    /// Set once the flow is stopping: what is left to do before the stage ends.
    draining: Option<Drain>,
    /// When a just-created topic's metadata was last asked for.
    metadata_asked: Option<Instant>,
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
    next: usize,
    destinations: Vec<(SlotId, Arc<str>, i32)>,
    metadata_deadline: Option<Instant>,
}

impl StageTask for ProduceTask {
    fn step(&mut self, wait: Duration) -> Result<Step, FlowError> {
        if self.draining.is_none() {
            match self.advance(wait) {
                Ok(Step::Finished) => self.begin_drain(),
                Ok(step) => return Ok(step),
                Err(()) => {
                    // A refusal stops the flow; what the target acknowledged is stored first.
                    self.stage.control.fail(self.stage.refusal_error());
                    self.begin_drain();
                }
            }
        }
        self.drain_step(wait)
    }
}

impl ProduceTask {
    /// Moves one batch on; `Err` when the target refused a record for good.
    fn advance(&mut self, wait: Duration) -> Result<Step, ()> {
        if self.stage.producer.context().state().ledger.refusal().is_some() {
            return Err(());
        }
        // A stopping flow sends nothing new: records of a batch not yet handed over were never
        // acknowledged, so no position passes them.
        if self.stage.control.stopping() {
            return Ok(Step::Finished);
        }
        let mut worked = false;
        if self.sending.is_none() {
            match self.stage.input.recv_timeout(wait.min(RECV_WAIT)) {
                Ok(batch) => self.sending = Some(self.stage.begin(batch)),
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
                    let mut state = self.stage.producer.context().state();
                    let first = state.ledger.refusal().is_none();
                    state.ledger.refused(refused.0.slot, SourceOffset(refused.0.offset), refused.0.reason);
                    if first && state.ledger.refusal().is_some() {
                        state.refused_code = refused.1;
                    }
                    return Err(());
                }
            }
        }
        self.stage.poll(Duration::ZERO);
        self.stage.count_acks();
        self.stage.emit_offset_syncs();
        if self.last_store.elapsed() >= self.stage.flush_interval {
            self.store_positions();
            self.last_store = Instant::now();
        }
        Ok(if worked { Step::Worked } else { Step::Idle })
    }

    fn begin_drain(&mut self) {
        let deadline = self.stage.control.deadline().unwrap_or_else(|| Instant::now() + DEFAULT_DRAIN);
        let now = Instant::now();
        // Most of the time goes to acknowledgements; the rest to storing the positions they reach.
        let window = deadline.saturating_duration_since(now);
        self.draining = Some(Drain { records_until: now + window.mul_f32(0.7), positions_until: deadline, positions_queued: false });
        self.sending = None;
    }

    /// One step of draining: never blocks longer than `wait`, so a stopping flow whose target is
    /// frozen holds up no other flow on the thread.
    fn drain_step(&mut self, wait: Duration) -> Result<Step, FlowError> {
        self.stage.poll(wait.min(Duration::from_millis(10)));
        self.stage.count_acks();
        let now = Instant::now();
        let Some(drain) = self.draining.as_mut() else { return Ok(Step::Finished) };
        // librdkafka's count leaves out records already refused, which will never be acknowledged.
        let in_flight = self.stage.producer.in_flight_count();
        if !drain.positions_queued {
            if in_flight > 0 && now < drain.records_until {
                return Ok(Step::Idle);
            }
            drain.positions_queued = true;
            self.stage.emit_offset_syncs();
            self.store_positions();
        }
        self.send_unstored();
        let Some(drain) = self.draining.as_ref() else { return Ok(Step::Finished) };
        let done = self.unstored.is_empty() && self.stage.producer.in_flight_count() == 0;
        if !done && now < drain.positions_until {
            return Ok(Step::Idle);
        }
        if !done {
            FlowRetrying { flow: &self.stage.flow, what: "stopping before the target acknowledged everything; positions cover only what it did, a restart re-sends the rest" }.emit();
        }
        if let Some(sink) = &self.stage.offset_syncs {
            let _ = sink.producer.flush(Duration::ZERO);
        }
        Ok(Step::Finished)
    }

    /// Tells the ledger about slots discovery added or retired since the last call.
    fn sync_slots(&mut self) {
        let slots = self.stage.slots.read();
        let mut state = self.stage.producer.context().state();
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

    /// Queues what the ledger says must be stored, and hands the producer as much as it takes.
    /// Never waits: a full queue keeps the rest for the next step.
    fn store_positions(&mut self) {
        self.sync_slots();
        // New writes only once the old ones are out, so the order (closed runs before the
        // position that follows them) holds and the queue stays small.
        if self.unstored.is_empty() {
            let writes = self.stage.producer.context().state().ledger.take_writes();
            if !writes.is_empty() {
                let slots = self.stage.slots.read();
                let (mut partitions, mut runs, mut mapping_bytes) = (0, 0, 0);
                for write in writes {
                    let record = match write {
                        PositionWrite::ClosedRun { slot, run } => slots.get(slot as usize).map(|s| {
                            runs += 1;
                            let r = (encode_run_key(&s.source_topic, s.partition, run.upstream), Some(encode_run_value(run)));
                            mapping_bytes += r.0.len() + r.1.as_ref().map_or(0, Vec::len);
                            r
                        }),
                        PositionWrite::Position { slot, next, open } => slots.get(slot as usize).map(|s| {
                            partitions += 1;
                            // The open run adds three INT64s to a record written anyway.
                            mapping_bytes += if open.is_some() { 24 } else { 0 };
                            (encode_key(&s.source_topic, s.partition), Some(encode_value(Stored { next: next.0, open })))
                        }),
                        PositionWrite::Forget { slot } => slots.get(slot as usize).map(|s| (encode_key(&s.source_topic, s.partition), None)),
                    };
                    self.unstored.extend(record);
                }
                PositionsStored { flow: &self.stage.flow, partitions, runs, mapping_bytes }.emit();
            }
        }
        self.send_unstored();
    }

    fn send_unstored(&mut self) {
        while let Some((key, value)) = self.unstored.front() {
            let mut record = BaseRecord::with_opaque_to(&self.stage.positions_topic, Box::new(Delivery::Position)).key(&key[..]);
            if let Some(v) = value {
                record = record.payload(&v[..]);
            }
            match self.stage.producer.send(record) {
                Ok(()) => {
                    self.unstored.pop_front();
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => return,
                Err((e, _)) => {
                    FlowRetrying { flow: &self.stage.flow, what: &format!("a position write failed ({e}); rewriting positions") }.emit();
                    self.unstored.clear();
                    self.stage.producer.context().state().ledger.write_failed();
                    return;
                }
            }
        }
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
        }
    }

    /// Serves delivery reports for up to `timeout`.
    fn poll(&self, timeout: Duration) {
        self.producer.poll(timeout);
        self.producer.context().state().round_clock_ms = None;
    }

    /// Hands the acknowledgements counted since the last call to the partition metrics.
    fn count_acks(&self) {
        let rounds = self.producer.context().state().acks.take();
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

    /// Marks a batch's records as sent and looks up where each of its partitions goes.
    fn begin(&self, batch: Batch) -> Sending {
        {
            let mut state = self.producer.context().state();
            for r in &batch.records {
                state.ledger.sent(r.slot, SourceOffset(r.offset));
            }
        }
        // Read before sending: `send` may poll, the delivery callback reads the slot table
        // too, and a recursive read behind a waiting writer (discovery adding slots) would
        // deadlock.
        let destinations = {
            let slots = self.slots.read();
            batch
                .fetched_through
                .iter()
                .filter_map(|&(id, _)| slots.get(id as usize).map(|s| (id, s.remote_topic.clone(), s.partition)))
                .collect()
        };
        Sending { batch, next: 0, destinations, metadata_deadline: None }
    }

    /// Hands the rest of a batch to the producer; `false` when its queue is full (that is the
    /// back-pressure) or a just-created topic is not in its metadata yet, to resume later.
    fn send_from(&self, s: &mut Sending, wait: Duration, metadata_asked: &mut Option<Instant>) -> Result<bool, (Refused, Option<RDKafkaErrorCode>)> {
        while let Some(record) = s.batch.records.get(s.next) {
            let Some((_, remote_topic, partition)) = s.destinations.iter().find(|(id, _, _)| *id == record.slot) else {
                s.next += 1;
                continue;
            };
            let delivery = Box::new(Delivery::Record {
                slot: record.slot,
                offset: record.offset,
                timestamp: record.timestamp,
                bytes: record.size(),
                routed: record.route.is_some(),
            });
            // A routed record leaves the partition to the target's partitioner: the route's
            // partition count is not the source's.
            let out = match &record.route {
                Some(topic) => to_kafka(record, topic, None, delivery),
                None => to_kafka(record, remote_topic, Some(*partition), delivery),
            };
            let refused = |reason: String, code| (Refused { slot: record.slot, offset: record.offset, reason }, code);
            match self.producer.send(out) {
                Ok(()) => s.next += 1,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    self.poll(wait.min(Duration::from_millis(20)));
                    return Ok(false);
                }
                Err((KafkaError::MessageProduction(code @ (RDKafkaErrorCode::UnknownPartition | RDKafkaErrorCode::UnknownTopic)), back)) => {
                    if *s.metadata_deadline.get_or_insert_with(|| Instant::now() + METADATA_WAIT) <= Instant::now() {
                        return Err(refused(format!("{} is not in the producer's metadata ({code})", back.topic), Some(code)));
                    }
                    // A metadata request refreshes librdkafka's cache for this topic.
                    if metadata_asked.is_none_or(|at| at.elapsed() >= METADATA_ASK_EVERY) {
                        *metadata_asked = Some(Instant::now());
                        if self.producer.client().fetch_metadata(Some(back.topic), METADATA_ASK_WAIT).is_err() {
                            FlowRetrying { flow: &self.flow, what: &format!("waiting for {} metadata ({code})", back.topic) }.emit();
                        }
                    }
                    self.poll(wait.min(Duration::from_millis(100)));
                    return Ok(false);
                }
                Err((e, _)) => return Err(refused(e.to_string(), e.rdkafka_error_code())),
            }
        }
        Ok(true)
    }

    /// Records of a fully sent batch that a stage dropped still move their partitions on.
    fn complete(&self, batch: &Batch) {
        let mut state = self.producer.context().state();
        for &(slot, through) in &batch.fetched_through {
            state.ledger.skipped_through(slot, SourceOffset(through));
        }
    }

    /// Writes the offset syncs that came due since the last call (MM2's layout; the source
    /// topic-partition is the key).
    fn emit_offset_syncs(&self) {
        let Some(sink) = &self.offset_syncs else { return };
        let due: Vec<(SlotId, OffsetSync)> = self.producer.context().state().ledger.take_syncs();
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

    /// The error for the first record the target refused.
    fn refusal_error(&self) -> FlowError {
        let (r, code) = {
            let state = self.producer.context().state();
            match state.ledger.refusal() {
                Some(r) => (r.clone(), state.refused_code),
                None => {
                    return FlowError::Thread { flow: self.flow.clone(), stage: "produce", what: "stopped on a refusal it could not report".into() };
                }
            }
        };
        let slots = self.slots.read();
        let (topic, partition, remote) = slots
            .get(r.slot as usize)
            .map(|s| (s.source_topic.to_string(), s.partition, s.remote_topic.to_string()))
            .unwrap_or_default();
        RecordRejected { flow: &self.flow, topic: &topic, partition, offset: r.offset.0, reason: &r.reason }.emit();
        let hint = match code {
            Some(RDKafkaErrorCode::MessageSizeTooLarge) | Some(RDKafkaErrorCode::InvalidRecord) => format!(
                "raise the target producer's `message.max.bytes` (`<target>.producer.message.max.bytes`) and the `max.message.bytes` of `{remote}` on the target"
            ),
            Some(RDKafkaErrorCode::TopicAuthorizationFailed) => format!("grant strait WRITE on `{remote}` on the target"),
            _ => "fix the cause and restart strait; it resumes at this record".to_string(),
        };
        FlowError::Rejected { flow: self.flow.clone(), topic, partition, offset: r.offset.0, reason: r.reason, hint }
    }
}

fn to_kafka<'a>(record: &'a Record, topic: &'a str, partition: Option<i32>, delivery: Box<Delivery>) -> BaseRecord<'a, [u8], [u8], Box<Delivery>> {
    let mut out = BaseRecord::with_opaque_to(topic, delivery).timestamp(record.timestamp);
    if let Some(p) = partition {
        out = out.partition(p);
    }
    if let Some(k) = &record.key {
        out = out.key(&k[..]);
    }
    if let Some(v) = &record.value {
        out = out.payload(&v[..]);
    }
    if !record.headers.is_empty() {
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
        for h in &record.headers {
            headers = headers.insert(KafkaHeader { key: &h.key, value: h.value.as_deref() });
        }
        out = out.headers(headers);
    }
    out
}
