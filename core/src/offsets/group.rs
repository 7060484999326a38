//! A consumer group's position translated to the other cluster: MM2's
//! `RemoteClusterUtils.translateOffsets`, from the offset syncs strait (or MM2) wrote.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::TopicPartitionList;

use super::mm2::OffsetSync;
use super::store::read_topic;
use super::Translator;
use crate::cluster::{create_client, ClusterError};
use crate::config::{Config, FlowConfig, SyncLocation};
use crate::pipeline::FlowError;
use crate::policy::{FlowPolicy, PolicyEngine, ReplicationPolicy, WasmNaming};

/// How long reading syncs or committed offsets may take.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// One partition of a group, translated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranslatedOffset {
    /// Source topic.
    pub topic: String,
    /// Partition (the same on both clusters).
    pub partition: i32,
    /// The group's committed offset on the source, if it has one.
    pub committed: Option<i64>,
    /// The topic's name on the target.
    pub remote_topic: String,
    /// Where the group can resume on the target without skipping a record; `None` when no
    /// sync is old enough (the group would have to start from the beginning there).
    pub translated: Option<i64>,
}

/// Translates `group`'s committed offsets for every partition `flow` has synced.
pub fn translate_group(config: &Config, flow: &FlowConfig, group: &str) -> Result<Vec<TranslatedOffset>, FlowError> {
    let missing = |alias: &str| ClusterError::Client { alias: alias.into(), what: "looking up the cluster".into(), reason: "not in `clusters`".into() };
    let source = config.cluster(&flow.source).ok_or_else(|| missing(flow.source.as_str()))?;
    let target = config.cluster(&flow.target).ok_or_else(|| missing(flow.target.as_str()))?;
    let policy = FlowPolicy::load(PolicyEngine::shared()?, flow)?;
    let naming = WasmNaming::new(policy.naming.instantiate(flow)?);
    let location = flow.offset_syncs.map_or(SyncLocation::Source, |c| c.location);
    let (sync_cluster, sync_settings, named_after) = match location {
        SyncLocation::Source => (source, &flow.source_admin, target.alias.as_str()),
        SyncLocation::Target => (target, &flow.target_admin, source.alias.as_str()),
    };
    let syncs_topic = naming.offset_syncs_topic(named_after)?;
    let mut translator = Translator::default();
    read_topic(sync_cluster, sync_settings, &syncs_topic, READ_TIMEOUT, |k, v| {
        if let Some(((topic, partition), sync)) = v.and_then(|v| OffsetSync::decode(k, v)) {
            translator.add(&topic, partition, sync);
        }
    })?;
    let mut partitions: Vec<(String, i32)> = translator.partitions().cloned().collect();
    partitions.sort();

    let consumer: BaseConsumer = create_client(
        source,
        &flow.consumer,
        "consumer",
        &[],
        &[("group.id", group), ("enable.auto.commit", "false")],
        rdkafka::consumer::DefaultConsumerContext,
    )?;
    let mut tpl = TopicPartitionList::new();
    for (topic, partition) in &partitions {
        tpl.add_partition(topic, *partition);
    }
    let committed = consumer.committed_offsets(tpl, READ_TIMEOUT).map_err(|e| ClusterError::Client {
        alias: source.alias.to_string(),
        what: format!("reading the committed offsets of group `{group}`"),
        reason: e.to_string(),
    })?;
    let mut out = Vec::new();
    for (topic, partition) in partitions {
        let committed = committed.find_partition(&topic, partition).and_then(|e| e.offset().to_raw()).filter(|o| *o >= 0);
        out.push(TranslatedOffset {
            remote_topic: naming.format_remote_topic(source.alias.as_str(), &topic)?,
            translated: committed.and_then(|c| translator.translate(&topic, partition, c)),
            topic,
            partition,
            committed,
        });
    }
    Ok(out)
}
