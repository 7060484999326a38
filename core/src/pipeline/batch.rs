//! The unit that moves between stages: a batch of records, never a single one.

use crate::offsets::SlotId;


/// One record header. Kafka allows a null header value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Header key.
    pub key: String,
    /// Header value; `None` is a null value.
    pub value: Option<Vec<u8>>,
}

/// One source record on its way to the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The source topic-partition (see [`super::Slots`]); the target partition has the same number.
    pub slot: SlotId,
    /// Offset in the source partition.
    pub offset: i64,
    /// Timestamp in milliseconds, copied to the target unchanged.
    pub timestamp: i64,
    /// Key; `None` is a null key.
    pub key: Option<Vec<u8>>,
    /// Value; `None` is a tombstone.
    pub value: Option<Vec<u8>>,
    /// Headers in their original order.
    pub headers: Vec<Header>,
    /// A target topic the policy routed this record to, instead of the slot's remote topic.
    pub route: Option<std::sync::Arc<str>>,
}

impl Record {
    /// Bytes of key, value and headers, MM2's `byte-count` measure.
    pub fn size(&self) -> usize {
        self.key.as_ref().map_or(0, Vec::len)
            + self.value.as_ref().map_or(0, Vec::len)
            + self.headers.iter().map(|h| h.key.len() + h.value.as_ref().map_or(0, Vec::len)).sum::<usize>()
    }
}

/// Records fetched together, plus the last fetched offset of every partition they came from,
/// so that records a stage drops still move the partition's position forward.
#[derive(Debug, Default)]
pub struct Batch {
    /// Records in fetch order (source order within each partition).
    pub records: Vec<Record>,
    /// `(slot, last offset fetched)` for each partition in this batch.
    pub fetched_through: Vec<(SlotId, i64)>,
}

impl Batch {
    /// An empty batch with room for `records` records.
    pub fn with_capacity(records: usize) -> Self {
        Self { records: Vec::with_capacity(records), fetched_through: Vec::new() }
    }

    /// Adds a record and notes how far its partition was fetched.
    pub fn push(&mut self, record: Record) {
        match self.fetched_through.iter_mut().find(|(slot, _)| *slot == record.slot) {
            Some(entry) => entry.1 = entry.1.max(record.offset),
            None => self.fetched_through.push((record.slot, record.offset)),
        }
        self.records.push(record);
    }
}
