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
use rdkafka::producer::{BaseProducer, BaseRecord, DefaultProducerContext, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;

use super::batch::{Batch, Record};
use super::fetch::now_millis;
use super::{FlowError, Slots};
use crate::events::{FlowRetrying, OffsetSyncsSent, PositionsStored, RecordRejected};
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
                s.metrics.acked(bytes, now_millis() - timestamp);
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
    pub producer: ThreadedProducer<DefaultProducerContext>,
    /// `mm2-offset-syncs.<alias>.internal`.
    pub topic: String,
}

/// How long a just-created remote topic or partition may take to show in producer metadata.
const METADATA_WAIT: Duration = Duration::from_secs(60);

/// How long shutdown waits for outstanding acknowledgements before storing positions anyway.
const SHUTDOWN_FLUSH: Duration = Duration::from_secs(30);

impl ProduceStage {
    /// Runs until the transform stage hangs up or the target refuses a record.
    pub fn run(self) -> Result<(), FlowError> {
        let mut last_store = Instant::now();
        let outcome = loop {
            if let Some(rejected) = self.producer.context().state().rejected.clone() {
                break Err(rejected);
            }
            match self.input.recv_timeout(Duration::from_millis(50)) {
                Ok(batch) => {
                    if let Err(rejected) = self.produce_batch(batch) {
                        break Err(rejected);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break Ok(()),
            }
            self.producer.poll(Duration::ZERO);
            self.emit_offset_syncs();
            if last_store.elapsed() >= self.flush_interval {
                self.store_positions();
                last_store = Instant::now();
            }
        };
        if outcome.is_err() {
            self.stop.store(true, Ordering::Relaxed);
        }
        // Wait for what is in flight, then store how far the acknowledged prefix reached.
        let _ = self.producer.flush(SHUTDOWN_FLUSH);
        self.store_positions();
        self.emit_offset_syncs();
        let _ = self.producer.flush(SHUTDOWN_FLUSH);
        if let Some(sink) = &self.offset_syncs {
            let _ = sink.producer.flush(SHUTDOWN_FLUSH);
        }
        let rejected = outcome.err().or_else(|| self.producer.context().state().rejected.clone());
        match rejected {
            None => Ok(()),
            Some(r) => Err(self.rejection_error(r)),
        }
    }

    fn produce_batch(&self, batch: Batch) -> Result<(), Rejection> {
        {
            let mut state = self.producer.context().state();
            for r in &batch.records {
                state.progress.sent(r.slot, r.offset);
            }
        }
        // Where each partition of the batch goes, read before sending: `send` may poll, the
        // delivery callback reads the slot table too, and a recursive read behind a waiting
        // writer (discovery adding slots) would deadlock.
        let destinations: Vec<(SlotId, Arc<str>, i32)> = {
            let slots = self.slots.read();
            batch
                .fetched_through
                .iter()
                .filter_map(|&(id, _)| slots.get(id as usize).map(|s| (id, s.remote_topic.clone(), s.partition)))
                .collect()
        };
        for record in &batch.records {
            let Some((_, remote_topic, partition)) = destinations.iter().find(|(id, _, _)| *id == record.slot) else { continue };
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
            self.send(out).map_err(|(reason, code)| Rejection { slot: record.slot, offset: record.offset, reason, code })?;
        }
        let mut state = self.producer.context().state();
        for &(slot, through) in &batch.fetched_through {
            state.progress.skipped_through(slot, through);
        }
        Ok(())
    }

    /// Sends one record, waiting while librdkafka's queue is full (that is the back-pressure),
    /// and while the producer's metadata has not yet seen a just-created topic or partition.
    fn send<'a>(&self, mut record: BaseRecord<'a, [u8], [u8], Box<Delivery>>) -> Result<(), (String, Option<RDKafkaErrorCode>)> {
        let mut metadata_deadline = None;
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    self.producer.poll(Duration::from_millis(20));
                }
                Err((KafkaError::MessageProduction(code @ (RDKafkaErrorCode::UnknownPartition | RDKafkaErrorCode::UnknownTopic)), back))
                    if *metadata_deadline.get_or_insert_with(|| Instant::now() + METADATA_WAIT) > Instant::now() =>
                {
                    record = back;
                    // A metadata request refreshes librdkafka's cache for this topic.
                    if self.producer.client().fetch_metadata(Some(record.topic), Duration::from_secs(5)).is_err() {
                        FlowRetrying { flow: &self.flow, what: &format!("waiting for {} metadata ({code})", record.topic) }.emit();
                    }
                    self.producer.poll(Duration::from_millis(100));
                }
                Err((e, _)) => return Err((e.to_string(), e.rdkafka_error_code())),
            }
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
        // Encoded before sending, for the same reason as in `produce_batch`. Closed runs go
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
            if self.send(record).is_err() {
                self.producer.context().state().position_write_failed = true;
            }
        }
        PositionsStored { flow: &self.flow, partitions, runs, mapping_bytes }.emit();
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
