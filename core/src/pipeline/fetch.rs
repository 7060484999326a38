//! Fetch: reads the assigned source partitions and hands on batches.
//!
//! Partitions are assigned (not subscribed), as MM2's source tasks do, so there is no consumer
//! group rebalance and the start offset of each partition is strait's own stored position.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::doorbell::Doorbell;
use super::lag::{cached_watermarks, LagTracker};
use super::pool::{StageTask, Step};
use super::stage::Handoff;
use super::{Slots, StageError};
use crate::clock::now_millis;
use crate::cluster::{create_client, ClusterError, Link, WatchedConsumer, ASSIGN_ONLY_CONSUMER, WATCHED};
use crate::events::{AssignRetried, AssignmentChanged, FlowLag, FlowRetrying, PartitionMetrics};
use crate::record::{Batch, SlotId, SourceOffset};
use crate::site::Site;
use crate::slot_vec::SlotVec;

/// A source partition to start reading.
#[derive(Debug, Clone)]
pub struct NewPartition {
    /// Its slot.
    pub slot: SlotId,
    /// Source topic.
    pub topic: String,
    /// Partition number.
    pub partition: i32,
    /// Where to start: the stored position, or the beginning.
    pub start: Offset,
}

/// A change of what the fetcher reads, from topic discovery.
#[derive(Debug, Clone, Default)]
pub struct AssignmentChange {
    /// Partitions to start reading.
    pub added: Vec<NewPartition>,
    /// Partitions of topics deleted on the source, to stop reading.
    pub removed: Vec<(SlotId, String, i32)>,
}

/// Partitions whose assignment failed, retried with a growing pause until they are assigned:
/// a partition is never left silently unread.
#[derive(Debug, Default)]
pub struct PendingAssignments {
    waiting: Vec<NewPartition>,
    attempts: u32,
    next_attempt: Option<Instant>,
}

/// The first pause before an assignment is tried again, doubled per failed attempt.
const ASSIGN_RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest pause between two attempts.
const ASSIGN_RETRY_MAX: Duration = Duration::from_secs(5);

impl PendingAssignments {
    /// Partitions whose attempt failed at `now`; they are due again after a pause.
    pub fn failed(&mut self, partitions: Vec<NewPartition>, now: Instant) {
        self.waiting.extend(partitions);
        self.attempts += 1;
        let pause = ASSIGN_RETRY_FIRST.saturating_mul(1 << self.attempts.min(16)).min(ASSIGN_RETRY_MAX);
        self.next_attempt = Some(now + pause);
    }

    /// Takes the partitions due for another attempt at `now`.
    pub fn due(&mut self, now: Instant) -> Option<Vec<NewPartition>> {
        if self.waiting.is_empty() || self.next_attempt.is_some_and(|at| now < at) {
            return None;
        }
        Some(std::mem::take(&mut self.waiting))
    }

    /// Every waiting partition was assigned.
    pub fn succeeded(&mut self) {
        if self.waiting.is_empty() {
            self.attempts = 0;
            self.next_attempt = None;
        }
    }

    /// Forgets waiting partitions of a deleted topic.
    pub fn forget(&mut self, topic: &str) {
        self.waiting.retain(|p| p.topic != topic);
    }

    /// Failed attempts in a row.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Partitions waiting.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether none is waiting.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

/// Everything the fetch stage needs.
pub struct FetchStage {
    /// `source->target`.
    pub flow: String,
    /// The source consumer, owned by this stage alone; its statistics tell `/readyz` whether
    /// the source still answers.
    pub consumer: BaseConsumer<WatchedConsumer>,
    /// New and removed partitions from topic discovery.
    pub assignments: Receiver<AssignmentChange>,
    /// The flow's slot table.
    pub slots: Slots,
    /// Set when the flow must stop.
    pub stop: Arc<AtomicBool>,
    /// Records per batch.
    pub max_records: usize,
    /// Bytes per batch.
    pub max_bytes: usize,
}

/// Consumer settings strait chooses unless the operator sets them: small prefetch queues so
/// memory stays bounded however many partitions are assigned, and librdkafka's (and Kafka's)
/// 500 ms long poll of an idle source: the broker answers as soon as a record arrives, so a
/// shorter one adds no speed, only requests (100 ms made every idle flow send 10 a second per
/// source broker).
///
/// A partition's fetch may bring 4 MiB rather than 1: the source consumer keeps one fetch in
/// flight per broker, so across a link a partition carries one fetch per round trip. Consuming
/// 100 ms away, 1 KiB records over 6 partitions drained at 51,000 records/s with 1 MiB, 162,000
/// with 4 MiB and 169,000 with 10 MiB; on loopback 4 MiB cost no CPU per record that two
/// rounds could see (10 MiB cost half again) and 40 MiB of RSS (RESULTS.md, issue 33). Under the
/// Java name, which librdkafka takes as an alias, so the key an operator writes replaces it.
const CONSUMER_DEFAULTS: &[(&str, &str)] = &[
    ("max.partition.fetch.bytes", "4194304"),
    ("queued.max.messages.kbytes", "8192"),
    ("fetch.wait.max.ms", "500"),
    ("fetch.queue.backoff.ms", "5"),
    ("queued.min.messages", "20000"),
    WATCHED,
];

impl FetchStage {
    /// The flow's fetcher: a consumer of the source that is assigned partitions, never
    /// subscribed, as discovery hands them over on `assignments`.
    pub fn for_flow(
        site: &Site<'_>,
        slots: Slots,
        assignments: Receiver<AssignmentChange>,
    ) -> Result<Self, ClusterError> {
        let flow = site.flow;
        let consumer = create_client(
            site.source,
            &flow.consumer,
            "consumer",
            CONSUMER_DEFAULTS,
            ASSIGN_ONLY_CONSUMER,
            WatchedConsumer(Link::new(&site.name, site.source.alias.as_str(), "consumer")),
        )?;
        Ok(Self {
            flow: site.name.clone(),
            consumer,
            assignments,
            slots,
            stop: site.stop.clone(),
            max_records: flow.batch_max_records,
            max_bytes: flow.batch_max_bytes,
        })
    }
}

/// The fetch stage with what it has learnt: where each partition's records go, and its way
/// out to the filter stage.
pub struct FetchTask {
    stage: FetchStage,
    by_topic: HashMap<String, SlotVec<Option<SlotId>>>,
    metrics: SlotVec<Option<PartitionMetrics>>,
    assigned: usize,
    pending: PendingAssignments,
    lag: LagTracker,
    out: Handoff,
}

impl FetchStage {
    /// The stage as a pool task, handing its batches to `output` (the filter stage, woken by
    /// `next_bell`); librdkafka rings `own_bell` when fetched records arrive.
    pub fn task(mut self, output: Sender<Batch>, own_bell: Doorbell, next_bell: Doorbell) -> FetchTask {
        // Called on a librdkafka thread for every queued fetch: only a ring, no client call.
        self.consumer.set_nonempty_callback(move || own_bell.ring());
        let out = Handoff::new(&self.flow, "filter", output, next_bell);
        FetchTask {
            stage: self,
            by_topic: HashMap::new(),
            metrics: SlotVec::default(),
            assigned: 0,
            pending: PendingAssignments::default(),
            lag: LagTracker::default(),
            out,
        }
    }
}

impl StageTask for FetchTask {
    fn step(&mut self, wait: Duration) -> Result<Step, StageError> {
        // Stopping drops the consumer and the channel; the stages after it drain and finish.
        if self.stage.stop.load(Ordering::Relaxed) {
            return Ok(Step::Finished);
        }
        while let Ok(change) = self.stage.assignments.try_recv() {
            self.unassign(&change.removed);
            self.try_assign(change.added);
        }
        if let Some(due) = self.pending.due(Instant::now()) {
            self.try_assign(due);
        }
        if self.lag.due(Instant::now()) {
            self.report_lag();
        }
        if self.assigned == 0 {
            std::thread::sleep(wait);
            return Ok(Step::Idle);
        }
        let batch = match self.out.take_pending() {
            Some(b) => b,
            None => {
                let b = self.stage.fill_batch(&self.by_topic, &self.metrics, &mut self.lag, wait);
                if b.records.is_empty() {
                    return Ok(Step::Idle);
                }
                b
            }
        };
        // Waits up to `wait` while the next stage is full: that is the back-pressure.
        Ok(self.out.offer(batch, wait))
    }
}

impl FetchTask {
    /// Assigns `new`; what fails is retried later, counted and logged each time.
    fn try_assign(&mut self, new: Vec<NewPartition>) {
        if new.is_empty() {
            return;
        }
        let count = new.len();
        match self.stage.assign(&new, &mut self.by_topic, &mut self.metrics) {
            Ok(()) => {
                for p in &new {
                    let start = match p.start {
                        Offset::Offset(o) => Some(SourceOffset(o)),
                        _ => None,
                    };
                    self.lag.started(p.slot, start);
                }
                self.assigned += count;
                self.pending.succeeded();
                AssignmentChanged { flow: &self.stage.flow, added: count as i64, total: self.assigned }.emit();
            }
            Err(e) => {
                self.pending.failed(new, Instant::now());
                AssignRetried {
                    flow: &self.stage.flow,
                    partitions: count,
                    attempt: self.pending.attempts(),
                    error: &e,
                }
                .emit();
            }
        }
    }

    /// Stops reading partitions of deleted topics.
    fn unassign(&mut self, removed: &[(SlotId, String, i32)]) {
        if removed.is_empty() {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        let mut count = 0;
        for (_, topic, partition) in removed {
            self.pending.forget(topic);
            let Some(parts) = self.by_topic.get_mut(topic) else { continue };
            if let Some(slot) = parts.get_mut(*partition as usize).filter(|s| s.is_some()) {
                if let Some(id) = slot.take() {
                    self.lag.forget(id);
                }
                count += 1;
                let _ = tpl.add_partition(topic, *partition);
            }
        }
        self.by_topic.retain(|_, parts| parts.iter().any(Option::is_some));
        if count == 0 {
            return;
        }
        // A partition the consumer no longer knows is unassigned already; nothing to retry.
        if let Err(e) = self.stage.consumer.incremental_unassign(&tpl) {
            FlowRetrying { flow: &self.stage.flow, what: &format!("unassigning partitions of deleted topics: {e}") }
                .emit();
        }
        self.assigned = self.assigned.saturating_sub(count);
        AssignmentChanged { flow: &self.stage.flow, added: -(count as i64), total: self.assigned }.emit();
    }

    /// Sets the flow's lag gauges from what librdkafka cached and the positions the produce
    /// stage published; no request to the source.
    fn report_lag(&mut self) {
        let now_ms = now_millis();
        let (mut records, mut age_ms) = (0i64, 0i64);
        for (topic, parts) in &self.by_topic {
            for (partition, slot) in parts.iter().enumerate() {
                let Some(slot) = *slot else { continue };
                let delivered = self
                    .metrics
                    .get(slot as usize)
                    .and_then(Option::as_ref)
                    .and_then(PartitionMetrics::delivered)
                    .map(SourceOffset);
                let watermarks = cached_watermarks(&self.stage.consumer, topic, partition as i32);
                let lag = self.lag.partition(slot, delivered, watermarks, now_ms);
                records += lag.records;
                age_ms = age_ms.max(lag.age_ms);
            }
        }
        FlowLag { flow: &self.stage.flow, records, seconds: age_ms as f64 / 1000.0 }.emit();
    }
}

impl FetchStage {
    fn assign(
        &self,
        new: &[NewPartition],
        by_topic: &mut HashMap<String, SlotVec<Option<SlotId>>>,
        metrics: &mut SlotVec<Option<PartitionMetrics>>,
    ) -> Result<(), String> {
        let mut tpl = TopicPartitionList::new();
        for p in new {
            tpl.add_partition_offset(&p.topic, p.partition, p.start)
                .map_err(|e| format!("{}-{}: {e}", p.topic, p.partition))?;
        }
        self.consumer.incremental_assign(&tpl).map_err(|e| e.to_string())?;
        let slots = self.slots.read();
        for p in new {
            let parts = by_topic.entry(p.topic.clone()).or_default();
            *parts.entry(p.partition as usize) = Some(p.slot);
            let s = p.slot as usize;
            *metrics.entry(s) = slots.get(s).map(|slot| slot.metrics.clone());
        }
        Ok(())
    }

    fn fill_batch(
        &self,
        by_topic: &HashMap<String, SlotVec<Option<SlotId>>>,
        metrics: &[Option<PartitionMetrics>],
        lag: &mut LagTracker,
        wait: Duration,
    ) -> Batch {
        let max_bytes = self.max_bytes.min(Batch::MAX_BYTES);
        // Small batches (a low rate) stay small; a full one grows its buffer a few times, and
        // glibc grows large blocks by remapping, without copying.
        let mut batch = Batch::with_capacity(self.max_records.min(4096), max_bytes.min(64 << 10));
        let now_ms = now_millis();
        // Per slot of this batch (few slots per batch, so a list): the oldest record age, and
        // the first record's offset and timestamp and the last offset, for the lag.
        let mut seen: Vec<BatchSlot> = Vec::new();
        while batch.records.len() < self.max_records && batch.data_len() < max_bytes {
            // Wait for the first record of a batch; take only what is already there after that.
            let timeout = if batch.records.is_empty() { wait } else { Duration::ZERO };
            match self.consumer.poll(timeout) {
                None => break,
                Some(Err(e)) => {
                    FlowRetrying { flow: &self.flow, what: &format!("fetch: {e}") }.emit();
                    break;
                }
                Some(Ok(m)) => {
                    let Some(slot) =
                        by_topic.get(m.topic()).and_then(|p| p.get(m.partition() as usize)).copied().flatten()
                    else {
                        continue;
                    };
                    push_record(&mut batch, slot, &m);
                    let Some(record) = batch.records.last() else { continue };
                    let age = now_ms - record.timestamp;
                    match seen.iter_mut().find(|s| s.slot == slot) {
                        Some(s) => {
                            s.oldest_age = s.oldest_age.max(age);
                            s.last = record.offset;
                        }
                        None => seen.push(BatchSlot {
                            slot,
                            oldest_age: age,
                            first: record.offset,
                            first_ts: record.timestamp,
                            last: record.offset,
                        }),
                    }
                }
            }
        }
        for s in seen {
            if let Some(Some(pm)) = metrics.get(s.slot as usize) {
                pm.fetched(s.oldest_age);
            }
            lag.read(s.slot, s.first, s.first_ts, s.last);
        }
        batch
    }
}

/// What one batch read of one partition.
struct BatchSlot {
    slot: SlotId,
    oldest_age: i64,
    first: SourceOffset,
    first_ts: i64,
    last: SourceOffset,
}

fn push_record(batch: &mut Batch, slot: SlotId, m: &BorrowedMessage<'_>) {
    let timestamp = m.timestamp().to_millis().unwrap_or_else(now_millis);
    let headers = m.headers();
    let headers = headers.iter().flat_map(|hs| hs.iter()).map(|h| (h.key.as_bytes(), h.value));
    batch.push(slot, SourceOffset(m.offset()), timestamp, m.key(), m.payload(), headers);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(slot: SlotId) -> NewPartition {
        NewPartition { slot, topic: "orders".into(), partition: slot as i32, start: Offset::Beginning }
    }

    #[test]
    fn a_failed_assignment_is_retried_after_a_growing_pause_until_it_succeeds() {
        let mut pending = PendingAssignments::default();
        let t0 = Instant::now();
        pending.failed(vec![partition(0), partition(1)], t0);
        assert!(pending.due(t0).is_none(), "not before the pause");
        let first = pending.due(t0 + ASSIGN_RETRY_MAX).expect("due after the pause");
        assert_eq!(first.len(), 2, "every partition that failed is tried again");
        pending.failed(first, t0);
        assert_eq!(pending.attempts(), 2);
        assert!(pending.due(t0 + ASSIGN_RETRY_FIRST * 2).is_none(), "the pause grew");
        let second = pending.due(t0 + ASSIGN_RETRY_MAX).expect("still retried");
        assert_eq!(second.len(), 2);
        pending.succeeded();
        assert_eq!(pending.attempts(), 0);
        assert!(pending.is_empty() && pending.due(t0 + ASSIGN_RETRY_MAX).is_none());
    }

    #[test]
    fn partitions_of_a_deleted_topic_are_not_retried() {
        let mut pending = PendingAssignments::default();
        pending.failed(vec![partition(0)], Instant::now());
        pending.forget("orders");
        assert!(pending.is_empty());
    }
}
