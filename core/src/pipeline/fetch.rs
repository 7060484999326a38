//! Fetch: reads the assigned source partitions and hands on batches.
//!
//! Partitions are assigned (not subscribed), as MM2's source tasks do, so there is no consumer
//! group rebalance and the start offset of each partition is strait's own stored position.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::batch::{Batch, Header, Record};
use super::pool::{StageTask, Step};
use super::stage::Handoff;
use super::{FlowError, Slots};
use crate::events::{AssignmentChanged, FlowRetrying, PartitionMetrics};
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

/// Everything the fetch stage needs.
pub struct FetchStage {
    /// `source->target`.
    pub flow: String,
    /// The source consumer, owned by this stage alone.
    pub consumer: BaseConsumer,
    /// New partitions from topic discovery.
    pub assignments: Receiver<Vec<NewPartition>>,
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
    out: Handoff,
}

impl FetchStage {
    /// The stage as a pool task, handing its batches to `output` (the filter stage).
    pub fn task(self, output: Sender<Batch>) -> FetchTask {
        let out = Handoff::new(&self.flow, "filter", output);
        FetchTask { stage: self, by_topic: HashMap::new(), metrics: Vec::new(), assigned: 0, out }
    }
}

impl StageTask for FetchTask {
    fn step(&mut self, wait: Duration) -> Result<Step, FlowError> {
        // Stopping drops the consumer and the channel; the stages after it drain and finish.
        if self.stage.stop.load(Ordering::Relaxed) {
            return Ok(Step::Finished);
        }
        while let Ok(new) = self.stage.assignments.try_recv() {
            self.stage.assign(&new, &mut self.by_topic, &mut self.metrics);
            self.assigned += new.len();
            AssignmentChanged { flow: &self.stage.flow, added: new.len(), total: self.assigned }.emit();
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

impl FetchStage {
    fn assign(&self, new: &[NewPartition], by_topic: &mut HashMap<String, Vec<Option<SlotId>>>, metrics: &mut Vec<Option<PartitionMetrics>>) {
        let mut tpl = TopicPartitionList::new();
        let slots = self.slots.read();
        for p in new {
            if let Err(e) = tpl.add_partition_offset(&p.topic, p.partition, p.start) {
                FlowRetrying { flow: &self.flow, what: &format!("cannot assign {}-{}: {e}", p.topic, p.partition) }.emit();
                continue;
            }
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
        if let Err(e) = self.consumer.incremental_assign(&tpl) {
            FlowRetrying { flow: &self.flow, what: &format!("cannot assign source partitions: {e}") }.emit();
        }
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
