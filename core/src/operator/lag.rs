//! How far replication of each source partition is behind: the records past the stored position
//! and the age of the oldest of them. This is the RPO if the source were lost now.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, DefaultConsumerContext};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::FlowView;
use crate::clock::now_millis;
use crate::cluster::{create_client, ClusterAdmin, ClusterError, ASSIGN_ONLY_CONSUMER};
use crate::flows::FlowError;
use crate::topics::topic_verdict;

/// How long finding the oldest unreplicated record may take.
const PEEK_TIMEOUT: Duration = Duration::from_secs(10);

/// Replication lag of one source partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    /// Source topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offsets past the stored position (records, plus any transaction markers among them).
    pub unreplicated: i64,
    /// Milliseconds since the oldest unreplicated record was written, when there is one.
    pub oldest_age_ms: Option<i64>,
}

/// The lag of every partition the flow has replicated; needs the source.
pub fn partition_lags(view: &FlowView) -> Result<Vec<PartitionLag>, FlowError> {
    let consumer: BaseConsumer = create_client(
        &view.source,
        &view.flow.consumer,
        "consumer",
        &[],
        ASSIGN_ONLY_CONSUMER,
        DefaultConsumerContext,
    )?;
    let fail = |what: String, e: rdkafka::error::KafkaError| ClusterError::Client {
        alias: view.source.alias.to_string(),
        what,
        reason: e.to_string(),
    };
    let mut out = Vec::new();
    let mut peek = TopicPartitionList::new();
    for (topic, partition) in &flow_partitions(view)? {
        let (low, high) = consumer
            .fetch_watermarks(topic, *partition, PEEK_TIMEOUT)
            .map_err(|e| fail(format!("reading the end of {topic}-{partition}"), e))?;
        let next =
            view.translation.forward.get(topic, *partition).and_then(|m| m.next()).map_or(low, |n| n.get()).max(low);
        let unreplicated = (high - next).max(0);
        if unreplicated > 0 {
            peek.add_partition_offset(topic, *partition, Offset::Offset(next))
                .map_err(|e| fail("assigning".into(), e))?;
        }
        out.push(PartitionLag { topic: topic.clone(), partition: *partition, unreplicated, oldest_age_ms: None });
    }
    if peek.count() == 0 {
        return Ok(out);
    }
    consumer.assign(&peek).map_err(|e| fail("assigning".into(), e))?;
    let mut oldest: HashMap<(String, i32), i64> = HashMap::new();
    let mut nothing_readable: Vec<(String, i32)> = Vec::new();
    let deadline = Instant::now() + PEEK_TIMEOUT;
    while oldest.len() + nothing_readable.len() < peek.count() && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                if let Some(ts) = m.timestamp().to_millis() {
                    oldest.entry((m.topic().to_string(), m.partition())).or_insert(ts);
                }
            }
            // Past the position there may be only transaction markers or aborted records: the
            // consumer then reaches the end without a record.
            _ => {
                nothing_readable = reached_end(&consumer, &out, &oldest);
            }
        }
    }
    let now = now_millis();
    for lag in &mut out {
        let key = (lag.topic.clone(), lag.partition);
        lag.oldest_age_ms = oldest.get(&key).map(|ts| (now - ts).max(0));
        if nothing_readable.contains(&key) {
            lag.unreplicated = 0;
        }
    }
    Ok(out)
}

/// Every source partition the flow replicates or is to replicate: those it stored a position
/// for (the position topic holds every flow from this source: only this one's), and those of
/// every source topic its filters pass, which it may not have reached yet (a topic just created,
/// a flow just started): all of their records are still to be copied.
fn flow_partitions(view: &FlowView) -> Result<BTreeSet<(String, i32)>, FlowError> {
    let mut keys: BTreeSet<(String, i32)> =
        view.translation.forward.partitions.keys().filter(|(t, _)| view.flow.topics.matches(t)).cloned().collect();
    let filters = view.policy.filters(&view.flow)?;
    let admin = ClusterAdmin::connect(&view.source, &view.flow.source_admin)?;
    for (topic, partitions) in admin.partition_counts()? {
        if topic_verdict(&topic, &view.flow.topics, &view.naming, &filters, view.target.alias.as_str())?.is_none() {
            keys.extend((0..partitions).map(|p| (topic.clone(), p)));
        }
    }
    Ok(keys)
}

/// Partitions with unreplicated offsets, no record read, and the consumer at their end.
fn reached_end(
    consumer: &BaseConsumer,
    lags: &[PartitionLag],
    oldest: &HashMap<(String, i32), i64>,
) -> Vec<(String, i32)> {
    let Ok(positions) = consumer.position() else { return Vec::new() };
    lags.iter()
        .filter(|l| l.unreplicated > 0 && !oldest.contains_key(&(l.topic.clone(), l.partition)))
        .filter(|l| {
            let position = positions.find_partition(&l.topic, l.partition).and_then(|e| e.offset().to_raw());
            let high = consumer.fetch_watermarks(&l.topic, l.partition, PEEK_TIMEOUT).map(|(_, h)| h).ok();
            matches!((position, high), (Some(p), Some(h)) if p >= h)
        })
        .map(|l| (l.topic.clone(), l.partition))
        .collect()
}
