//! Where acknowledged positions live: a compacted topic on the target,
//! `strait-offsets.<source>.internal`, one record per source partition.
//!
//! Keeping them on the target (as MM2 keeps its Connect offsets) means a later exactly-once mode
//! can write a position in the same producer transaction as the records it covers.
//! Key: topic STRING, partition INT32. Value: version INT16 = 0, next offset INT64.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::wire::{put_i16, put_i32, put_i64, put_string, Reader};
use crate::cluster::{create_client, ClusterError, ClusterAdmin, TopicSpec};
use crate::config::{ClientSettings, ClusterConfig};

/// Source positions by (source topic, partition): the next offset to fetch.
pub type Positions = HashMap<(String, i32), i64>;

/// The name of the position topic of flows from `source_alias`.
pub fn positions_topic(source_alias: &str) -> String {
    format!("strait-offsets.{source_alias}.internal")
}

/// The spec strait creates the position topic with.
pub fn positions_topic_spec(source_alias: &str, replication_factor: i32) -> TopicSpec {
    TopicSpec::compacted_single(positions_topic(source_alias), replication_factor)
}

/// Encodes the key of a position record.
pub fn encode_key(topic: &str, partition: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(topic.len() + 6);
    put_string(&mut out, topic);
    put_i32(&mut out, partition);
    out
}

/// Encodes the value of a position record.
pub fn encode_value(next_offset: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(10);
    put_i16(&mut out, 0);
    put_i64(&mut out, next_offset);
    out
}

/// Decodes a position record; `None` for records of another layout.
pub fn decode(key: &[u8], value: &[u8]) -> Option<((String, i32), i64)> {
    let mut k = Reader::new(key);
    let mut v = Reader::new(value);
    let id = (k.string()?, k.i32()?);
    (v.i16()? == 0).then_some(())?;
    Some((id, v.i64()?))
}

/// Reads every stored position of flows from `source_alias`, creating the topic if needed.
pub fn load_positions(
    target: &ClusterConfig,
    settings: &ClientSettings,
    admin: &ClusterAdmin,
    source_alias: &str,
    replication_factor: i32,
    timeout: Duration,
) -> Result<Positions, ClusterError> {
    let spec = positions_topic_spec(source_alias, replication_factor);
    admin.ensure_exists(&spec)?;
    let mut positions = Positions::new();
    read_topic(target, settings, &spec.name, timeout, |k, v| {
        if let Some((id, offset)) = decode(k, v) {
            positions.insert(id, offset);
        }
    })?;
    Ok(positions)
}

/// Reads partition 0 of a single-partition internal topic from its beginning to its current
/// end, handing every record's key and value to `on_record`.
pub fn read_topic(
    cluster: &ClusterConfig,
    settings: &ClientSettings,
    topic: &str,
    timeout: Duration,
    mut on_record: impl FnMut(&[u8], &[u8]),
) -> Result<(), ClusterError> {
    let consumer: BaseConsumer = create_client(
        cluster,
        settings,
        "consumer",
        &[],
        &[("group.id", "strait"), ("enable.auto.commit", "false"), ("isolation.level", "read_committed"), ("enable.partition.eof", "false")],
        rdkafka::consumer::DefaultConsumerContext,
    )?;
    let fail = |what: &str, reason: String| ClusterError::Client { alias: cluster.alias.to_string(), what: format!("{what} {topic}"), reason };
    let deadline = Instant::now() + timeout;
    // A just-created topic may need a moment before its leader answers.
    let (low, high) = loop {
        match consumer.fetch_watermarks(topic, 0, Duration::from_secs(5)) {
            Ok(w) => break w,
            Err(e) if Instant::now() > deadline => return Err(fail("finding the end of", e.to_string())),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    if high <= low {
        return Ok(());
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning).map_err(|e| fail("assigning", e.to_string()))?;
    consumer.assign(&tpl).map_err(|e| fail("assigning", e.to_string()))?;
    loop {
        if Instant::now() > deadline {
            return Err(fail("reading", format!("not done within {}s", timeout.as_secs())));
        }
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                if let (Some(k), Some(v)) = (m.key(), m.payload()) {
                    on_record(k, v);
                }
                if m.offset() >= high - 1 {
                    return Ok(());
                }
            }
            Some(Err(e)) => return Err(fail("reading", e.to_string())),
            None => {
                if let Ok(Some(pos)) = consumer.position().map(|p| p.find_partition(topic, 0).and_then(|e| e.offset().to_raw())) {
                    if pos >= high {
                        return Ok(());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_record_round_trip() {
        let key = encode_key("orders", 2);
        let value = encode_value(12345);
        assert_eq!(decode(&key, &value), Some((("orders".to_string(), 2), 12345)));
        assert_eq!(decode(&key, &[0, 1, 0]), None);
    }
}
