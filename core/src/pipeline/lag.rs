//! The flow's replication lag as the fetch stage sees it, for `strait_flow_lag_records` and
//! `strait_flow_lag_seconds`, reported once a second without a request to the source:
//!
//! - the end of each source partition is the high watermark librdkafka caches from every fetch
//!   response (`rd_kafka_get_watermark_offsets`, no network round-trip);
//! - the next offset to deliver is the produce stage's position (the first record the target has
//!   not acknowledged, past records filtered out), which it publishes on the partition's metric
//!   handles;
//! - the age is that of the oldest record read from the source and not yet acknowledged by the
//!   target, to the batch: the fetch stage remembers the first offset and timestamp of each batch
//!   per partition, and the oldest batch still holding an undelivered record gives the age.

use std::collections::VecDeque;
use std::ffi::CString;
use std::time::{Duration, Instant};

use rdkafka::bindings as rd;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};

use crate::record::{SlotId, SourceOffset};
use crate::slot_vec::SlotVec;

/// How often the lag is reported.
pub const LAG_EVERY: Duration = Duration::from_secs(1);

/// What one partition contributes to its flow's lag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionLagNow {
    /// Offsets from the next one to deliver to the high watermark (transaction markers count).
    pub records: i64,
    /// Milliseconds since the oldest undelivered record that was read was written; 0 when none.
    pub age_ms: i64,
}

#[derive(Debug)]
struct SlotLag {
    /// Where reading started, when the stored position said so.
    start: Option<SourceOffset>,
    /// (first offset, its timestamp) of each batch read, oldest first.
    batches: VecDeque<(SourceOffset, i64)>,
    /// The offset after the last record read.
    read_next: SourceOffset,
}

impl Default for SlotLag {
    fn default() -> Self {
        Self { start: None, batches: VecDeque::new(), read_next: SourceOffset(0) }
    }
}

/// Per-partition memory of what was read, and the clock of the reports.
#[derive(Debug, Default)]
pub struct LagTracker {
    slots: SlotVec<SlotLag>,
    next_report: Option<Instant>,
}

impl LagTracker {
    /// Reading of `slot` starts; at `start` when that is a stored position.
    pub fn started(&mut self, slot: SlotId, start: Option<SourceOffset>) {
        *self.slot(slot) = SlotLag { start, ..SlotLag::default() };
    }

    /// `slot` is no longer read.
    pub fn forget(&mut self, slot: SlotId) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            *s = SlotLag::default();
        }
    }

    /// A batch held records of `slot` from `first` (written at `first_ts`) up to `last`.
    pub fn read(&mut self, slot: SlotId, first: SourceOffset, first_ts: i64, last: SourceOffset) {
        let s = self.slot(slot);
        s.batches.push_back((first, first_ts));
        s.read_next = s.read_next.max(last.next());
    }

    /// Whether a report is due at `now`; if so the next is one [`LAG_EVERY`] later.
    pub fn due(&mut self, now: Instant) -> bool {
        if self.next_report.is_some_and(|at| now < at) {
            return false;
        }
        self.next_report = Some(now + LAG_EVERY);
        true
    }

    /// The lag of `slot`, given the next offset to deliver (`None` before the first
    /// acknowledgement of this lifetime: the start position, else the low watermark), and the
    /// cached watermarks (`high` negative when unknown yet).
    pub fn partition(
        &mut self,
        slot: SlotId,
        delivered: Option<SourceOffset>,
        (low, high): (i64, i64),
        now_ms: i64,
    ) -> PartitionLagNow {
        let s = self.slot(slot);
        let floor = SourceOffset(low.max(0));
        let next = delivered.or(s.start).unwrap_or(floor).max(floor);
        let records = if high >= 0 { SourceOffset(high).since(next).max(0) } else { 0 };
        if next >= s.read_next {
            s.batches.clear();
        }
        // The batch before the one starting after `next` holds the record at `next`.
        while s.batches.len() >= 2 && s.batches[1].0 <= next {
            s.batches.pop_front();
        }
        let age_ms = s.batches.front().map_or(0, |(_, ts)| (now_ms - ts).max(0));
        PartitionLagNow { records, age_ms }
    }

    fn slot(&mut self, slot: SlotId) -> &mut SlotLag {
        self.slots.entry(slot as usize)
    }
}

/// The low and high watermarks librdkafka last saw for a partition the consumer reads, without
/// asking the broker; `(-1001, -1001)` (librdkafka's invalid offset) for what it has not seen.
pub fn cached_watermarks<C: ConsumerContext>(consumer: &BaseConsumer<C>, topic: &str, partition: i32) -> (i64, i64) {
    let (mut low, mut high) = (rd::RD_KAFKA_OFFSET_INVALID as i64, rd::RD_KAFKA_OFFSET_INVALID as i64);
    let Ok(topic) = CString::new(topic) else { return (low, high) };
    // SAFETY: the client pointer lives as long as `consumer`; the topic is a valid C string for
    // the call; librdkafka writes only the two offsets.
    let err = unsafe {
        rd::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        return (rd::RD_KAFKA_OFFSET_INVALID as i64, rd::RD_KAFKA_OFFSET_INVALID as i64);
    }
    (low, high)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caught_up_is_zero_in_records_and_seconds() {
        let mut t = LagTracker::default();
        t.started(0, Some(SourceOffset(10)));
        t.read(0, SourceOffset(10), 1_000, SourceOffset(19));
        assert_eq!(t.partition(0, Some(SourceOffset(20)), (0, 20), 5_000), PartitionLagNow { records: 0, age_ms: 0 });
    }

    #[test]
    fn the_age_is_the_oldest_batch_still_holding_an_undelivered_record() {
        let mut t = LagTracker::default();
        t.started(0, None);
        t.read(0, SourceOffset(0), 1_000, SourceOffset(9));
        t.read(0, SourceOffset(10), 2_000, SourceOffset(19));
        t.read(0, SourceOffset(20), 3_000, SourceOffset(29));
        // Nothing acknowledged yet: from the low watermark, the first batch's age.
        assert_eq!(t.partition(0, None, (0, 40), 10_000), PartitionLagNow { records: 40, age_ms: 9_000 });
        // Delivered up to 14: the second batch holds the next record.
        assert_eq!(
            t.partition(0, Some(SourceOffset(15)), (0, 40), 10_000),
            PartitionLagNow { records: 25, age_ms: 8_000 }
        );
        // Everything read is delivered; 10 more offsets exist but were not read yet.
        assert_eq!(t.partition(0, Some(SourceOffset(30)), (0, 40), 10_000), PartitionLagNow { records: 10, age_ms: 0 });
    }

    #[test]
    fn the_stored_start_counts_before_the_first_acknowledgement_and_unknown_ends_count_nothing() {
        let mut t = LagTracker::default();
        t.started(3, Some(SourceOffset(100)));
        assert_eq!(t.partition(3, None, (-1001, 150), 0).records, 50);
        assert_eq!(t.partition(3, None, (-1001, -1001), 0).records, 0);
        t.forget(3);
        assert_eq!(t.partition(3, None, (0, 150), 0).records, 150);
    }

    #[test]
    fn reports_are_a_second_apart() {
        let mut t = LagTracker::default();
        let t0 = Instant::now();
        assert!(t.due(t0));
        assert!(!t.due(t0 + LAG_EVERY / 2));
        assert!(t.due(t0 + LAG_EVERY));
    }
}
