//! Produce: writes batches to the target and advances each partition's position only over the
//! records the target acknowledged. Positions are written through the same producer, so an
//! exactly-once mode can later put them in the same transaction as the records they cover.

use std::sync::atomic::{AtomicBool, Ordering};
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
use super::pool::{StageTask, Step};
use super::fetch::now_millis;
use super::{FlowError, Slots};
use crate::cluster::ControlProducer;
use crate::events::{AckRounds, FlowRetrying, OffsetSyncsSent, PositionsStored, RecordRejected};
use crate::offsets::store::{encode_key, encode_run_key, encode_run_value, encode_value, Stored};
use crate::offsets::mm2::OffsetSync;
use crate::offsets::{Progress, Run, RunTracker, SlotId, SyncRule};

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

/// A record the target refused for good.
#[derive(Debug, Clone)]
struct Rejection {
    slot: SlotId,
    offset: i64,
    reason: String,
    code: Option<RDKafkaErrorCode>,
}

#[derive(Default)]
struct DeliveryState {
    progress: Progress,
    rejected: Option<Rejection>,
    position_write_failed: bool,
    /// MM2's emission rule per slot, present when offset syncs are on.
    sync_rules: Option<(i64, Vec<Option<SyncRule>>)>,
    /// Syncs due, in acknowledgement order; the produce loop writes them out.
    pending_syncs: Vec<(SlotId, OffsetSync)>,
    /// The exact offset mapping per slot, built from acknowledgements in order.
    runs: Vec<Option<RunTracker>>,
    /// Runs closed since positions were last stored; they are stored first.
    closed_runs: Vec<(SlotId, Run)>,
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
    slots: Slots,
}

impl DeliveryContext {
    /// A context for a flow whose partitions are in `slots`; `offset_lag_max` turns on MM2's
    /// offset-sync rule.
    pub fn new(slots: Slots, offset_lag_max: Option<i64>) -> Self {
        let state = DeliveryState { sync_rules: offset_lag_max.map(|lag| (lag, Vec::new())), ..DeliveryState::default() };
        Self { state: Mutex::new(state), slots }
    }

    fn state(&self) -> MutexGuard<'_, DeliveryState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl DeliveryState {
    /// The slot's run tracker, continuing the run a previous lifetime stored.
    fn runs(&mut self, slot: SlotId, resume: Option<Run>) -> &mut RunTracker {
        let i = slot as usize;
        if self.runs.len() <= i {
            self.runs.resize(i + 1, None);
        }
        self.runs[i].get_or_insert_with(|| RunTracker::resume(resume))
    }

    fn rule_check(&mut self, slot: SlotId, upstream: i64, downstream: i64) {
        let Some((lag, rules)) = self.sync_rules.as_mut() else { return };
        let i = slot as usize;
        if rules.len() <= i {
            rules.resize(i + 1, None);
        }
        if rules[i].get_or_insert_with(|| SyncRule::new(*lag)).update(upstream, downstream) {
            self.pending_syncs.push((slot, OffsetSync { upstream, downstream }));
        }
    }
}

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<Delivery>;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: Self::DeliveryOpaque) {
        let mut state = self.state();
        match (*opaque, result) {
            (Delivery::Record { slot, offset, timestamp, bytes, routed }, Ok(message)) => {
                state.progress.acked(slot, offset);
                let slots = self.slots.read();
                let Some(s) = slots.get(slot as usize) else { return };
                // A re-routed record is no mirror of its source offset: to the mapping it is a gap.
                if !routed {
                    state.rule_check(slot, offset, message.offset());
                    if let Some(closed) = state.runs(slot, s.resume_run).acked(offset, message.offset()) {
                        state.closed_runs.push((slot, closed));
                    }
                }
                let now = *state.round_clock_ms.get_or_insert_with(now_millis);
                state.acks.add(slot, bytes, now - timestamp);
            }
            (Delivery::Record { slot, offset, .. }, Err((e, _))) => {
                if state.rejected.is_none() {
                    state.rejected = Some(Rejection { slot, offset, reason: e.to_string(), code: e.rdkafka_error_code() });
                }
            }
            (Delivery::Position, Ok(_)) => {}
            (Delivery::Position, Err(_)) => state.position_write_failed = true,
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
    /// Set to stop the whole process (on a fatal error here, or by a signal).
    pub stop: Arc<AtomicBool>,
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

/// How long shutdown waits for outstanding acknowledgements before storing positions anyway.
const SHUTDOWN_FLUSH: Duration = Duration::from_secs(30);

/// How long the produce stage waits for a batch before serving acknowledgements again.
const RECV_WAIT: Duration = Duration::from_millis(50);

/// The produce stage as a pool task.
pub struct ProduceTask {
    stage: ProduceStage,
    /// A batch partly handed to the producer (its queue was full).
    sending: Option<Sending>,
    last_store: Instant,
}

/// A batch being handed to the producer, and how far it got.
struct Sending {
    batch: Batch,
    next: usize,
    destinations: Vec<(SlotId, Arc<str>, i32)>,
    metadata_deadline: Option<Instant>,
}

impl StageTask for ProduceTask {
    fn step(&mut self, wait: Duration) -> Result<Step, FlowError> {
        match self.advance(wait) {
            Ok(Step::Finished) => self.stage.finish(None).map(|()| Step::Finished),
            Ok(step) => Ok(step),
            Err(rejected) => {
                self.stage.stop.store(true, Ordering::Relaxed);
                // The stage is dropped after this; what the target acknowledged is stored first.
                Err(self.stage.finish(Some(rejected)).err().unwrap_or_else(|| FlowError::Thread {
                    flow: self.stage.flow.clone(),
                    stage: "produce",
                    what: "stopped on a rejection it could not report".into(),
                }))
            }
        }
    }
}

impl ProduceTask {
    fn advance(&mut self, wait: Duration) -> Result<Step, Rejection> {
        if let Some(rejected) = self.stage.producer.context().state().rejected.clone() {
            return Err(rejected);
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
            if self.stage.send_from(sending, wait)? {
                if let Some(done) = self.sending.take() {
                    self.stage.complete(&done.batch);
                }
                worked = true;
            }
        }
        self.stage.poll(Duration::ZERO);
        self.stage.count_acks();
        self.stage.emit_offset_syncs();
        if self.last_store.elapsed() >= self.stage.flush_interval {
            self.stage.store_positions();
            self.last_store = Instant::now();
        }
        Ok(if worked { Step::Worked } else { Step::Idle })
    }
}

impl ProduceStage {
    /// The stage as a pool task.
    pub fn task(self) -> ProduceTask {
        ProduceTask { stage: self, sending: None, last_store: Instant::now() }
    }

    /// Waits for what is in flight, stores how far the acknowledged prefix reached, and
    /// reports a record the target refused.
    fn finish(&self, rejected: Option<Rejection>) -> Result<(), FlowError> {
        self.flush();
        self.count_acks();
        self.store_positions();
        self.emit_offset_syncs();
        self.flush();
        if let Some(sink) = &self.offset_syncs {
            let _ = sink.producer.flush(SHUTDOWN_FLUSH);
        }
        match rejected.or_else(|| self.producer.context().state().rejected.clone()) {
            None => Ok(()),
            Some(r) => Err(self.rejection_error(r)),
        }
    }

    /// Waits up to `SHUTDOWN_FLUSH` for every outstanding acknowledgement.
    fn flush(&self) {
        let started = Instant::now();
        while self.producer.in_flight_count() > 0 && started.elapsed() < SHUTDOWN_FLUSH {
            self.poll(Duration::from_millis(100));
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
                state.progress.sent(r.slot, r.offset);
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
    fn send_from(&self, s: &mut Sending, wait: Duration) -> Result<bool, Rejection> {
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
            let rejection = |reason: String, code| Rejection { slot: record.slot, offset: record.offset, reason, code };
            match self.producer.send(out) {
                Ok(()) => s.next += 1,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    self.poll(wait.min(Duration::from_millis(20)));
                    return Ok(false);
                }
                Err((KafkaError::MessageProduction(code @ (RDKafkaErrorCode::UnknownPartition | RDKafkaErrorCode::UnknownTopic)), back)) => {
                    if *s.metadata_deadline.get_or_insert_with(|| Instant::now() + METADATA_WAIT) <= Instant::now() {
                        return Err(rejection(format!("{} is not in the producer's metadata ({code})", back.topic), Some(code)));
                    }
                    // A metadata request refreshes librdkafka's cache for this topic.
                    if self.producer.client().fetch_metadata(Some(back.topic), Duration::from_secs(5)).is_err() {
                        FlowRetrying { flow: &self.flow, what: &format!("waiting for {} metadata ({code})", back.topic) }.emit();
                    }
                    self.poll(wait.min(Duration::from_millis(100)));
                    return Ok(false);
                }
                Err((e, _)) => return Err(rejection(e.to_string(), e.rdkafka_error_code())),
            }
        }
        Ok(true)
    }

    /// Records of a fully sent batch that a stage dropped still move their partitions on.
    fn complete(&self, batch: &Batch) {
        let mut state = self.producer.context().state();
        for &(slot, through) in &batch.fetched_through {
            state.progress.skipped_through(slot, through);
        }
    }

    /// Writes the offset syncs that came due since the last call (MM2's layout; the source
    /// topic-partition is the key).
    fn emit_offset_syncs(&self) {
        let Some(sink) = &self.offset_syncs else { return };
        let due: Vec<(SlotId, OffsetSync)> = {
            let mut state = self.producer.context().state();
            if state.pending_syncs.is_empty() {
                return;
            }
            std::mem::take(&mut state.pending_syncs)
        };
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

    fn store_positions(&self) {
        // Encoded before sending, for the same reason as in `begin`. Closed runs go
        // first: a position record's open run supersedes the runs it follows.
        let (encoded, partitions, runs, mapping_bytes) = {
            let mut state = self.producer.context().state();
            if std::mem::take(&mut state.position_write_failed) {
                FlowRetrying { flow: &self.flow, what: "a position write failed; rewriting positions" }.emit();
                state.progress.mark_all_changed();
            }
            let changed = state.progress.take_changed();
            if changed.is_empty() && state.closed_runs.is_empty() {
                return;
            }
            let slots = self.slots.read();
            let mut encoded: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(changed.len() + state.closed_runs.len());
            let mut mapping_bytes = 0;
            let closed = std::mem::take(&mut state.closed_runs);
            for &(slot, run) in &closed {
                if let Some(s) = slots.get(slot as usize) {
                    let record = (encode_run_key(&s.source_topic, s.partition, run.upstream), encode_run_value(run));
                    mapping_bytes += record.0.len() + record.1.len();
                    encoded.push(record);
                }
            }
            for &(slot, next) in &changed {
                if let Some(s) = slots.get(slot as usize) {
                    let open = state.runs(slot, s.resume_run).open();
                    // The open run adds three INT64s to a record written anyway.
                    mapping_bytes += if open.is_some() { 24 } else { 0 };
                    encoded.push((encode_key(&s.source_topic, s.partition), encode_value(Stored { next, open })));
                }
            }
            (encoded, changed.len(), closed.len(), mapping_bytes)
        };
        for (key, value) in &encoded {
            let record = BaseRecord::with_opaque_to(&self.positions_topic, Box::new(Delivery::Position)).key(&key[..]).payload(&value[..]);
            if self.send_position(record).is_err() {
                self.producer.context().state().position_write_failed = true;
            }
        }
        PositionsStored { flow: &self.flow, partitions, runs, mapping_bytes }.emit();
    }

    /// Sends a position record, waiting while the producer's queue is full: positions are
    /// few and must not be skipped.
    fn send_position<'a>(&self, mut record: BaseRecord<'a, [u8], [u8], Box<Delivery>>) -> Result<(), KafkaError> {
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    self.poll(Duration::from_millis(20));
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    fn rejection_error(&self, r: Rejection) -> FlowError {
        let slots = self.slots.read();
        let (topic, partition, remote) = slots
            .get(r.slot as usize)
            .map(|s| (s.source_topic.to_string(), s.partition, s.remote_topic.to_string()))
            .unwrap_or_default();
        RecordRejected { flow: &self.flow, topic: &topic, partition, offset: r.offset, reason: &r.reason }.emit();
        let hint = match r.code {
            Some(RDKafkaErrorCode::MessageSizeTooLarge) | Some(RDKafkaErrorCode::InvalidRecord) => format!(
                "raise the target producer's `message.max.bytes` (`<target>.producer.message.max.bytes`) and the `max.message.bytes` of `{remote}` on the target"
            ),
            Some(RDKafkaErrorCode::TopicAuthorizationFailed) => format!("grant strait WRITE on `{remote}` on the target"),
            _ => "fix the cause and restart strait; it resumes at this record".to_string(),
        };
        FlowError::Rejected { flow: self.flow.clone(), topic, partition, offset: r.offset, reason: r.reason, hint }
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
