//! Per remote topic-partition series, MM2's set: record count, byte count, record age and
//! replication latency. Handles are resolved once per partition so the hot path does no
//! registry look-up.

use metrics::{counter, histogram, Counter, Histogram};

/// The metric handles of one remote topic-partition.
#[derive(Clone)]
pub struct PartitionMetrics {
    records: Counter,
    bytes: Counter,
    record_age: Histogram,
    latency: Histogram,
}

impl PartitionMetrics {
    /// Registers (or finds) the series of `topic`/`partition` in `flow`.
    pub fn new(flow: &str, topic: &str, partition: i32) -> Self {
        let labels = [("flow", flow.to_string()), ("topic", topic.to_string()), ("partition", partition.to_string())];
        Self {
            records: counter!("strait_replication_records_total", &labels),
            bytes: counter!("strait_replication_bytes_total", &labels),
            record_age: histogram!("strait_replication_record_age_seconds", &labels),
            latency: histogram!("strait_replication_latency_seconds", &labels),
        }
    }

    /// A record was fetched `age_ms` after its timestamp.
    pub fn fetched(&self, age_ms: i64) {
        self.record_age.record(age_ms.max(0) as f64 / 1000.0);
    }

    /// The target acknowledged a record of `bytes` bytes `latency_ms` after its timestamp.
    pub fn acked(&self, bytes: usize, latency_ms: i64) {
        self.records.increment(1);
        self.bytes.increment(bytes as u64);
        self.latency.record(latency_ms.max(0) as f64 / 1000.0);
    }
}
