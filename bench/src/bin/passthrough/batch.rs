//! Record batches (Kafka's v2 format) taken as bytes: split a fetched partition's records into
//! whole batches, and stamp a batch with the target producer's identity without decoding its
//! records. Only the fixed header is read or written; records, and their compression, stay as
//! the source wrote them.

use anyhow::bail;
use bytes::Bytes;

/// The fixed header's length: everything before the first record.
const HEADER: usize = 61;
/// Where the fields the pass-through reads or writes sit in a batch.
const BATCH_LENGTH: usize = 8;
const LEADER_EPOCH: usize = 12;
const MAGIC: usize = 16;
const CRC: usize = 17;
/// The CRC covers the batch from its attributes to its end.
const ATTRIBUTES: usize = 21;
const LAST_OFFSET_DELTA: usize = 23;
const PRODUCER_ID: usize = 43;
const PRODUCER_EPOCH: usize = 51;
const BASE_SEQUENCE: usize = 53;
/// Attribute bits.
const TRANSACTIONAL: i16 = 0x10;
const CONTROL: i16 = 0x20;

/// One whole batch as fetched.
#[derive(Debug, Clone)]
pub struct RawBatch {
    /// Its bytes, header included.
    pub bytes: Bytes,
}

impl RawBatch {
    /// The offset of its first record on the source.
    pub fn base_offset(&self) -> i64 {
        i64::from_be_bytes(self.bytes[0..8].try_into().unwrap_or_default())
    }

    /// Offsets it spans less one: its records' count, when no record was compacted away.
    pub fn last_offset_delta(&self) -> i32 {
        i32::from_be_bytes(self.bytes[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].try_into().unwrap_or_default())
    }

    /// The offset after its last record: where the next fetch starts.
    pub fn next_offset(&self) -> i64 {
        self.base_offset() + i64::from(self.last_offset_delta()) + 1
    }

    fn attributes(&self) -> i16 {
        i16::from_be_bytes(self.bytes[ATTRIBUTES..ATTRIBUTES + 2].try_into().unwrap_or_default())
    }

    /// A transaction marker: no records of the partition, never forwarded.
    pub fn is_control(&self) -> bool {
        self.attributes() & CONTROL != 0
    }

    /// Written in a transaction: forwarding it would need the aborted transactions filtered
    /// out first, which the prototype does not do.
    pub fn is_transactional(&self) -> bool {
        self.attributes() & TRANSACTIONAL != 0
    }
}

/// The whole batches of `records` (a partition's fetched bytes), in order. A fetch may end in
/// a batch cut short by the size limit; it is left out and fetched again whole next time.
pub fn split(records: &Bytes) -> anyhow::Result<Vec<RawBatch>> {
    let mut batches = Vec::new();
    let mut at = 0;
    while records.len() - at >= HEADER {
        let length = i32::from_be_bytes(records[at + BATCH_LENGTH..at + BATCH_LENGTH + 4].try_into()?);
        let end = at + 12 + usize::try_from(length)?;
        if end > records.len() {
            break;
        }
        if records[at + MAGIC] != 2 {
            bail!(
                "a record batch of format v{} at byte {at}: only v2 (Kafka 0.11 and later) passes through",
                records[at + MAGIC]
            );
        }
        batches.push(RawBatch { bytes: records.slice(at..end) });
        at = end;
    }
    Ok(batches)
}

/// The target producer's identity on a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// The id the target gave the producer.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
    /// The sequence of the batch's first record in the target partition.
    pub base_sequence: i32,
}

/// Appends `batch` to `out` with the target producer's identity: base offset 0, no leader epoch,
/// `stamp`'s producer id, epoch and sequence, and the CRC computed again over the new header and
/// the untouched records. Returns the sequence the partition's next batch starts at.
pub fn stamp_into(out: &mut Vec<u8>, batch: &RawBatch, stamp: Stamp) -> i32 {
    let start = out.len();
    out.extend_from_slice(&batch.bytes);
    let b = &mut out[start..];
    b[0..8].copy_from_slice(&0i64.to_be_bytes());
    b[LEADER_EPOCH..LEADER_EPOCH + 4].copy_from_slice(&(-1i32).to_be_bytes());
    b[PRODUCER_ID..PRODUCER_ID + 8].copy_from_slice(&stamp.producer_id.to_be_bytes());
    b[PRODUCER_EPOCH..PRODUCER_EPOCH + 2].copy_from_slice(&stamp.producer_epoch.to_be_bytes());
    b[BASE_SEQUENCE..BASE_SEQUENCE + 4].copy_from_slice(&stamp.base_sequence.to_be_bytes());
    let crc = crc32c::crc32c(&b[ATTRIBUTES..]);
    b[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    stamp.base_sequence.wrapping_add(batch.last_offset_delta()).wrapping_add(1)
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::indexmap::IndexMap;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    use super::*;

    fn record(offset: i64, value: &str) -> Record {
        Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 7,
            producer_id: 1000,
            producer_epoch: 3,
            timestamp_type: TimestampType::Creation,
            offset,
            sequence: offset as i32,
            timestamp: 1_700_000_000_000 + offset,
            key: Some(Bytes::from(format!("k{offset}"))),
            value: Some(Bytes::from(value.to_string())),
            headers: IndexMap::from([(StrBytes::from_static_str("h"), Some(Bytes::from_static(b"1")))]),
        }
    }

    /// Two batches as a source broker would return them, the second cut short.
    fn fetched() -> (Bytes, usize) {
        let options = RecordEncodeOptions { version: 2, compression: Compression::None };
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(&mut buf, &[record(40, "a"), record(41, "bb"), record(42, "ccc")], &options)
            .expect("encode");
        let first = buf.len();
        RecordBatchEncoder::encode(&mut buf, &[record(43, "d")], &options).expect("encode");
        buf.truncate(buf.len() - 3);
        (buf.freeze(), first)
    }

    #[test]
    fn split_keeps_whole_batches_and_leaves_a_cut_one_for_the_next_fetch() {
        let (bytes, first) = fetched();
        let batches = split(&bytes).expect("split");
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].bytes.len(), first);
        assert_eq!((batches[0].base_offset(), batches[0].next_offset()), (40, 43));
        assert!(!batches[0].is_control() && !batches[0].is_transactional());
    }

    #[test]
    fn a_stamped_batch_decodes_with_a_valid_crc_the_new_identity_and_the_same_records() {
        let (bytes, _) = fetched();
        let batch = split(&bytes).expect("split").remove(0);
        let mut out = Vec::new();
        let stamp = Stamp { producer_id: 55, producer_epoch: 0, base_sequence: 10 };
        assert_eq!(stamp_into(&mut out, &batch, stamp), 13, "three records take sequences 10-12");
        let decoded = RecordBatchDecoder::decode(&mut Bytes::from(out)).expect("the CRC checks").records;
        let values: Vec<_> = decoded.iter().map(|r| r.value.clone()).collect();
        assert_eq!(values, vec![Some(Bytes::from("a")), Some(Bytes::from("bb")), Some(Bytes::from("ccc"))]);
        for (i, r) in decoded.iter().enumerate() {
            assert_eq!((r.producer_id, r.producer_epoch, r.sequence), (55, 0, 10 + i as i32));
            assert_eq!(
                (r.offset, r.timestamp),
                (i as i64, 1_700_000_000_040 + i as i64),
                "offsets restart, timestamps stay"
            );
            assert_eq!(r.key, Some(Bytes::from(format!("k{}", 40 + i))));
            assert_eq!(r.headers.get(&StrBytes::from_static_str("h")), Some(&Some(Bytes::from_static(b"1"))));
        }
    }
}
