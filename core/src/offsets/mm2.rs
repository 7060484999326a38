//! MirrorMaker 2's internal record layouts, byte for byte, so MM2's own Java tools
//! (`RemoteClusterUtils`, `MirrorClient`) read what strait writes and the other way round.
//! Kafka protocol encoding throughout (see [`super::wire`]).

use super::wire::{put_i16, put_i32, put_i64, put_string, topic_partition_key, Reader};

/// An offset sync (`mm2-offset-syncs.<alias>.internal`): upstream offset → downstream offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetSync {
    /// Offset in the source partition.
    pub upstream: i64,
    /// Offset of the same record in the remote partition.
    pub downstream: i64,
}

impl OffsetSync {
    /// Key: topic STRING, partition INT32 (the source topic-partition).
    pub fn encode_key(topic: &str, partition: i32) -> Vec<u8> {
        topic_partition_key(topic, partition)
    }

    /// Value: upstream offset INT64, downstream offset INT64.
    pub fn encode_value(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16);
        put_i64(&mut out, self.upstream);
        put_i64(&mut out, self.downstream);
        out
    }

    /// Decodes a record of the offset-syncs topic.
    pub fn decode(key: &[u8], value: &[u8]) -> Option<((String, i32), OffsetSync)> {
        let mut k = Reader::new(key);
        let mut v = Reader::new(value);
        Some(((k.string()?, k.i32()?), OffsetSync { upstream: v.i64()?, downstream: v.i64()? }))
    }
}

/// A checkpoint (`<source>.checkpoints.internal` on the target): where a group is, upstream
/// and translated downstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The consumer group.
    pub group: String,
    /// The topic as named on the target (the remote topic).
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The group's committed offset upstream.
    pub upstream: i64,
    /// The translated offset downstream.
    pub downstream: i64,
    /// The commit's metadata string.
    pub metadata: String,
}

impl Checkpoint {
    /// Key: group STRING, topic STRING, partition INT32.
    pub fn encode_key(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_string(&mut out, &self.group);
        put_string(&mut out, &self.topic);
        put_i32(&mut out, self.partition);
        out
    }

    /// Value: version INT16 = 0, upstream INT64, downstream INT64, metadata STRING.
    pub fn encode_value(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_i16(&mut out, 0);
        put_i64(&mut out, self.upstream);
        put_i64(&mut out, self.downstream);
        put_string(&mut out, &self.metadata);
        out
    }

    /// Decodes a record of a checkpoints topic.
    pub fn decode(key: &[u8], value: &[u8]) -> Option<Checkpoint> {
        let mut k = Reader::new(key);
        let mut v = Reader::new(value);
        let (group, topic, partition) = (k.string()?, k.string()?, k.i32()?);
        (v.i16()? == 0).then_some(())?;
        Some(Checkpoint { group, topic, partition, upstream: v.i64()?, downstream: v.i64()?, metadata: v.string()? })
    }
}

/// A heartbeat (`heartbeats` on the target): the flow was alive at `timestamp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// Source cluster alias.
    pub source: String,
    /// Target cluster alias.
    pub target: String,
    /// Milliseconds since the epoch.
    pub timestamp: i64,
}

impl Heartbeat {
    /// Key: source alias STRING, target alias STRING.
    pub fn encode_key(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_string(&mut out, &self.source);
        put_string(&mut out, &self.target);
        out
    }

    /// Value: version INT16 = 0, timestamp INT64.
    pub fn encode_value(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(10);
        put_i16(&mut out, 0);
        put_i64(&mut out, self.timestamp);
        out
    }

    /// Decodes a record of a heartbeats topic.
    pub fn decode(key: &[u8], value: &[u8]) -> Option<Heartbeat> {
        let mut k = Reader::new(key);
        let mut v = Reader::new(value);
        let (source, target) = (k.string()?, k.string()?);
        (v.i16()? == 0).then_some(())?;
        Some(Heartbeat { source, target, timestamp: v.i64()? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_sync_bytes_match_mm2() {
        let key = OffsetSync::encode_key("orders", 1);
        assert_eq!(key, [0, 6, b'o', b'r', b'd', b'e', b'r', b's', 0, 0, 0, 1]);
        let value = OffsetSync { upstream: 100, downstream: 200 }.encode_value();
        assert_eq!(value, [0, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 0, 0, 0, 0, 200]);
        assert_eq!(
            OffsetSync::decode(&key, &value),
            Some((("orders".into(), 1), OffsetSync { upstream: 100, downstream: 200 }))
        );
    }

    #[test]
    fn checkpoint_and_heartbeat_round_trip_with_version_zero() {
        let c = Checkpoint {
            group: "orders-cg".into(),
            topic: "us-east.orders".into(),
            partition: 2,
            upstream: 120,
            downstream: 102,
            metadata: "".into(),
        };
        let (k, v) = (c.encode_key(), c.encode_value());
        assert_eq!(&v[..2], &[0, 0]);
        assert_eq!(v.len(), 2 + 8 + 8 + 2);
        assert_eq!(Checkpoint::decode(&k, &v), Some(c));
        let h = Heartbeat { source: "us-east".into(), target: "us-west".into(), timestamp: 1_700_000_000_000 };
        assert_eq!(Heartbeat::decode(&h.encode_key(), &h.encode_value()), Some(h));
    }
}
