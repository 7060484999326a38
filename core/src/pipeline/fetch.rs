//! Fetch: reads the assigned source partitions and hands on batches.
//!
//! Partitions are assigned (not subscribed), as MM2's source tasks do, so there is no consumer
//! group rebalance and the start offset of each partition is strait's own stored position.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::batch::{Batch, Header, Record};
use super::pool::{StageTask, Step};
use super::stage::Handoff;
use super::{FlowError, Slots};
use crate::events::{AssignRetried, AssignmentChanged, FlowRetrying, PartitionMetrics};
use crate::offsets::SlotId;

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
    /// The source consumer, owned by this stage alone.
    pub consumer: BaseConsumer,
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

/// The fetch stage with what it has learnt: where each partition's records go, and its way
/// out to the filter stage.
pub struct FetchTask {
    stage: FetchStage,
    by_topic: HashMap<String, Vec<Option<SlotId>>>,
    metrics: Vec<Option<PartitionMetrics>>,
    assigned: usize,
    pending: PendingAssignments,
    out: Handoff,
}

impl FetchStage {
    /// The stage as a pool task, handing its batches to `output` (the filter stage).
    pub fn task(self, output: Sender<Batch>) -> FetchTask {
        let out = Handoff::new(&self.flow, "filter", output);
        FetchTask { stage: self, by_topic: HashMap::new(), metrics: Vec::new(), assigned: 0, pending: PendingAssignments::default(), out }
    }
}

impl StageTask for FetchTask {
    fn step(&mut self, wait: Duration) -> Result<Step, FlowError> {
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
        if self.assigned == 0 {
            std::thread::sleep(wait);
            return Ok(Step::Idle);
        }
        let batch = match self.out.take_pending() {
            Some(b) => b,
            None => {
                let b = self.stage.fill_batch(&self.by_topic, &self.metrics, wait);
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
                self.assigned += count;
                self.pending.succeeded();
                AssignmentChanged { flow: &self.stage.flow, added: count as i64, total: self.assigned }.emit();
            }
            Err(e) => {
                self.pending.failed(new, Instant::now());
                AssignRetried { flow: &self.stage.flow, partitions: count, attempt: self.pending.attempts(), error: &e }.emit();
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
                *slot = None;
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
            FlowRetrying { flow: &self.stage.flow, what: &format!("unassigning partitions of deleted topics: {e}") }.emit();
        }
        self.assigned = self.assigned.saturating_sub(count);
        AssignmentChanged { flow: &self.stage.flow, added: -(count as i64), total: self.assigned }.emit();
    }
}

impl FetchStage {
    fn assign(&self, new: &[NewPartition], by_topic: &mut HashMap<String, Vec<Option<SlotId>>>, metrics: &mut Vec<Option<PartitionMetrics>>) -> Result<(), String> {
        let mut tpl = TopicPartitionList::new();
        for p in new {
            tpl.add_partition_offset(&p.topic, p.partition, p.start).map_err(|e| format!("{}-{}: {e}", p.topic, p.partition))?;
        }
        self.consumer.incremental_assign(&tpl).map_err(|e| e.to_string())?;
        let slots = self.slots.read();
        for p in new {
            let parts = by_topic.entry(p.topic.clone()).or_default();
            let i = p.partition as usize;
            if parts.len() <= i {
                parts.resize(i + 1, None);
            }
            parts[i] = Some(p.slot);
            let s = p.slot as usize;
            if metrics.len() <= s {
                metrics.resize(s + 1, None);
            }
            metrics[s] = slots.get(s).map(|slot| slot.metrics.clone());
        }
        Ok(())
    }

    fn fill_batch(&self, by_topic: &HashMap<String, Vec<Option<SlotId>>>, metrics: &[Option<PartitionMetrics>], wait: Duration) -> Batch {
        let mut batch = Batch::with_capacity(self.max_records.min(4096));
        let mut bytes = 0usize;
        let now_ms = now_millis();
        // The oldest record age per slot of this batch; few slots per batch, so a list.
        let mut oldest: Vec<(SlotId, i64)> = Vec::new();
        while batch.records.len() < self.max_records && bytes < self.max_bytes {
            // Wait for the first record of a batch; take only what is already there after that.
            let timeout = if batch.records.is_empty() { wait } else { Duration::ZERO };
            match self.consumer.poll(timeout) {
                None => break,
                Some(Err(e)) => {
                    FlowRetrying { flow: &self.flow, what: &format!("fetch: {e}") }.emit();
                    break;
                }
                Some(Ok(m)) => {
                    let Some(slot) = by_topic.get(m.topic()).and_then(|p| p.get(m.partition() as usize)).copied().flatten() else {
                        continue;
                    };
                    let record = to_record(slot, &m);
                    let age = now_ms - record.timestamp;
                    match oldest.iter_mut().find(|(s, _)| *s == slot) {
                        Some((_, a)) => *a = (*a).max(age),
                        None => oldest.push((slot, age)),
                    }
                    bytes += record.size();
                    batch.push(record);
                }
            }
        }
        for (slot, age) in oldest {
            if let Some(Some(pm)) = metrics.get(slot as usize) {
                pm.fetched(age);
            }
        }
        batch
    }
}

fn to_record(slot: SlotId, m: &BorrowedMessage<'_>) -> Record {
    let headers = m
        .headers()
        .map(|hs| hs.iter().map(|h| Header { key: h.key.to_string(), value: h.value.map(<[u8]>::to_vec) }).collect())
        .unwrap_or_default();
    Record {
        slot,
        offset: m.offset(),
        timestamp: m.timestamp().to_millis().unwrap_or_else(now_millis),
        key: m.key().map(<[u8]>::to_vec),
        value: m.payload().map(<[u8]>::to_vec),
        headers,
        route: None,
    }
}

/// Wall-clock milliseconds since the epoch, the clock Kafka timestamps use.
pub fn now_millis() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
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
