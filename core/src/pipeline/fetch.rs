//! Fetch: reads the assigned source partitions and hands on batches.
//!
//! Partitions are assigned (not subscribed), as MM2's source tasks do, so there is no consumer
//! group rebalance and the start offset of each partition is strait's own stored position.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, SendTimeoutError, Sender};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::batch::{Batch, Header, Record};
use super::Slots;
use crate::events::{AssignmentChanged, FlowRetrying, PartitionMetrics, QueueDepth};
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

/// Everything the fetch thread needs.
pub struct FetchStage {
    /// `source->target`.
    pub flow: String,
    /// The source consumer, owned by this stage alone.
    pub consumer: BaseConsumer,
    /// New partitions from topic discovery.
    pub assignments: Receiver<Vec<NewPartition>>,
    /// To the filter stage.
    pub output: Sender<Batch>,
    /// The flow's slot table.
    pub slots: Slots,
    /// Set when the flow must stop.
    pub stop: Arc<AtomicBool>,
    /// Records per batch.
    pub max_records: usize,
    /// Bytes per batch.
    pub max_bytes: usize,
}

impl FetchStage {
    /// Runs until `stop` is set or the next stage hangs up.
    pub fn run(self) {
        let mut by_topic: HashMap<String, Vec<Option<SlotId>>> = HashMap::new();
        let mut metrics: Vec<Option<PartitionMetrics>> = Vec::new();
        let mut assigned = 0usize;
        while !self.stop.load(Ordering::Relaxed) {
            while let Ok(new) = self.assignments.try_recv() {
                self.assign(&new, &mut by_topic, &mut metrics);
                assigned += new.len();
                AssignmentChanged { flow: &self.flow, added: new.len(), total: assigned }.emit();
            }
            if assigned == 0 {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            let batch = self.fill_batch(&by_topic, &metrics);
            if batch.records.is_empty() {
                continue;
            }
            if !self.send(batch) {
                return;
            }
        }
    }

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

    fn fill_batch(&self, by_topic: &HashMap<String, Vec<Option<SlotId>>>, metrics: &[Option<PartitionMetrics>]) -> Batch {
        let mut batch = Batch::with_capacity(self.max_records.min(4096));
        let mut bytes = 0usize;
        let now_ms = now_millis();
        while batch.records.len() < self.max_records && bytes < self.max_bytes {
            // Wait for the first record of a batch; take only what is already there after that.
            let timeout = if batch.records.is_empty() { Duration::from_millis(100) } else { Duration::ZERO };
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
                    if let Some(Some(pm)) = metrics.get(slot as usize) {
                        pm.fetched(now_ms - record.timestamp);
                    }
                    bytes += record.size();
                    batch.push(record);
                }
            }
        }
        batch
    }

    /// Blocks while the next stage is full (this is the back-pressure), waking to check `stop`.
    fn send(&self, mut batch: Batch) -> bool {
        loop {
            match self.output.send_timeout(batch, Duration::from_millis(200)) {
                Ok(()) => {
                    QueueDepth { flow: &self.flow, stage: "filter", batches: self.output.len() }.emit();
                    return true;
                }
                Err(SendTimeoutError::Timeout(b)) if !self.stop.load(Ordering::Relaxed) => batch = b,
                Err(_) => return false,
            }
        }
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
