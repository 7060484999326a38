//! What the operator commands compute: a group's positions on the other cluster
//! (`strait offsets translate`, MM2's `RemoteClusterUtils`), the failover plan with its RPO
//! (`strait failover`), each flow's health (`strait status`) and proof of the copy
//! (`strait verify`).
//!
//! Everything is read from the clusters, never from a running strait: the commands work while
//! strait is down, and `failover` works while the source is down (from the checkpoints).

pub mod drill;
mod failover;
mod lag;
mod preview;
mod status;
pub mod verify;

pub use failover::{apply_failover, flow_groups, plan_failover, plan_flow_failover, FailoverPlan};
pub use lag::PartitionLag;
pub use preview::{preview_filters, FilterPreview};
pub use status::{flow_status, FlowStatus, GroupStatus};

use std::collections::HashMap;
use std::time::Duration;

use crate::checkpoints::{Groups, Translation, Watched};
use crate::cluster::{check_reachable, ClusterAdmin, ClusterError};
use crate::config::{ClusterConfig, Config, FlowConfig};
use crate::flows::FlowError;
use crate::offsets::mm2::Checkpoint;
use crate::offsets::store::read_topic;
use crate::policy::{FlowPolicy, PolicyEngine, ReplicationPolicy, WasmNaming};
use crate::record::{SourceOffset, TargetOffset};

/// How long an operator command may take to read an internal topic from its start (positions,
/// checkpoints, heartbeats): once per command, so it may be long.
const WHOLE_TOPIC_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the commands wait to find out whether the source answers.
const SOURCE_TIMEOUT: Duration = Duration::from_secs(10);

/// A group's latest checkpoint per (target topic, partition).
pub type LatestCheckpoints = HashMap<(String, i32), Checkpoint>;

/// One flow as the operator commands see it.
pub struct FlowView {
    /// `source->target`.
    pub name: String,
    /// The source cluster.
    pub source: ClusterConfig,
    /// The target cluster.
    pub target: ClusterConfig,
    /// The flow's settings.
    pub flow: FlowConfig,
    /// The flow's naming policy.
    pub naming: WasmNaming,
    /// The exact offset mappings, forward and (when the other direction runs) back.
    pub translation: Translation,
    /// Whether the source answered.
    pub source_reachable: bool,
    /// Groups on the target.
    pub target_groups: Groups,
    /// The fingerprint of the flow's settings in this config ([`FlowConfig::fingerprint`]).
    pub settings: u64,
    /// The flow's policy components, compiled once for every command that asks them.
    pub policy: FlowPolicy,
}

impl FlowView {
    /// Loads the flow `from->to` of `config`.
    pub fn load(config: &Config, from: &str, to: &str) -> Result<Self, FlowError> {
        let flow = config
            .flows
            .iter()
            .find(|f| f.source.as_str() == from && f.target.as_str() == to)
            .ok_or_else(|| ClusterError::Client {
                alias: from.into(),
                what: format!("finding the flow {from}->{to}"),
                reason: format!("it is not enabled; add `{from}->{to}.enabled = true`"),
            })?
            .clone();
        let missing = |alias: &str| ClusterError::Client {
            alias: alias.into(),
            what: "looking up the cluster".into(),
            reason: "not in `clusters`".into(),
        };
        let source = config.cluster(&flow.source).ok_or_else(|| missing(flow.source.as_str()))?.clone();
        let target = config.cluster(&flow.target).ok_or_else(|| missing(flow.target.as_str()))?.clone();
        let policy = FlowPolicy::load(PolicyEngine::shared()?, &flow)?;
        let naming = WasmNaming::new(policy.naming.instantiate(&flow)?);

        let target_admin = ClusterAdmin::connect(&target, &flow.target_admin)?;
        check_reachable(&target_admin, &target, SOURCE_TIMEOUT)?;
        let target_groups = Groups::connect(&target, &flow.target_admin)?;
        let source_admin = ClusterAdmin::connect(&source, &flow.source_admin)?;
        let source_reachable = check_reachable(&source_admin, &source, SOURCE_TIMEOUT).is_ok();

        let settings = flow.fingerprint(config);
        let mut view = Self {
            name: flow.name(),
            source,
            target,
            flow,
            naming,
            translation: Translation::default(),
            source_reachable,
            target_groups,
            settings,
            policy,
        };
        view.read_positions()?;
        Ok(view)
    }

    /// Reads the flow's stored positions again (and the reverse flow's, when the source
    /// answers): the offset mappings as they are now.
    pub fn read_positions(&mut self) -> Result<(), FlowError> {
        let mut translation = Translation::default();
        let flow = &self.flow;
        if self.target_groups.topic_exists(&flow.positions_topic)? {
            read_topic(&self.target, &flow.target_admin, &flow.positions_topic, WHOLE_TOPIC_READ_TIMEOUT, |k, v| {
                translation.forward.apply(k, v)
            })?;
        }
        if self.source_reachable {
            let back = &flow.back_positions_topic;
            if Groups::connect(&self.source, &flow.consumer)?.topic_exists(back)? {
                read_topic(&self.source, &flow.consumer, back, WHOLE_TOPIC_READ_TIMEOUT, |k, v| {
                    translation.back.apply(k, v)
                })?;
            }
        }
        self.translation = translation;
        Ok(())
    }

    /// Every partition a group could be translated for.
    pub fn watched(&self) -> Result<Vec<Watched>, FlowError> {
        self.translation
            .watched(&self.naming, &self.flow.topics, self.source.alias.as_str(), self.target.alias.as_str())
            .map_err(FlowError::from)
    }

    /// The latest checkpoint of every group per (target topic, partition), from the target.
    pub fn all_checkpoints(&self) -> Result<HashMap<String, LatestCheckpoints>, FlowError> {
        let topic = self.naming.checkpoints_topic(self.source.alias.as_str())?;
        let mut out: HashMap<String, LatestCheckpoints> = HashMap::new();
        if self.target_groups.topic_exists(&topic)? {
            read_topic(&self.target, &self.flow.target_admin, &topic, WHOLE_TOPIC_READ_TIMEOUT, |k, v| {
                if let Some(c) = v.and_then(|v| Checkpoint::decode(k, v)) {
                    out.entry(c.group.clone()).or_default().insert((c.topic.clone(), c.partition), c);
                }
            })?;
        }
        Ok(out)
    }
}

/// One partition of a group, translated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranslatedOffset {
    /// The partition and its names on both sides.
    pub watched: Watched,
    /// The group's committed offset on the source, if it has one and the source answered.
    pub committed: Option<SourceOffset>,
    /// Where the group resumes on the target: exact, from the mapping (or from the latest
    /// checkpoint when the source is down).
    pub translated: Option<TargetOffset>,
}

/// `group`'s positions on the target of `view`'s flow.
pub fn translate_group(view: &FlowView, group: &str) -> Result<Vec<TranslatedOffset>, FlowError> {
    Ok(translate_groups(view, &[group.to_string()])?.pop().map(|(_, rows)| rows).unwrap_or_default())
}

/// Each of `groups`' positions on the target of `view`'s flow, the checkpoints read once.
pub fn translate_groups(view: &FlowView, groups: &[String]) -> Result<Vec<(String, Vec<TranslatedOffset>)>, FlowError> {
    let watched = view.watched()?;
    let checkpoints = view.all_checkpoints()?;
    let source = if view.source_reachable { Some(Groups::connect(&view.source, &view.flow.consumer)?) } else { None };
    let partitions: Vec<(String, i32)> = watched.iter().map(|w| (w.source_topic.clone(), w.partition)).collect();
    let none = HashMap::new();
    let mut out = Vec::new();
    for group in groups {
        let committed = match &source {
            Some(source) => source.committed(group, &partitions)?,
            None => Vec::new(),
        };
        let checkpoints = checkpoints.get(group).unwrap_or(&none);
        let mut rows = Vec::new();
        for w in &watched {
            let c = committed.iter().find(|c| c.topic == w.source_topic && c.partition == w.partition);
            let checkpoint = checkpoints.get(&(w.target_topic.clone(), w.partition));
            if c.is_none() && checkpoint.is_none() {
                continue;
            }
            let translated = match c {
                Some(c) => view.translation.resume_at(w, SourceOffset(c.offset)),
                None => checkpoint.map(|cp| TargetOffset(cp.downstream)),
            };
            rows.push(TranslatedOffset {
                committed: c.map(|c| c.offset).or(checkpoint.map(|cp| cp.upstream)).map(SourceOffset),
                translated,
                watched: w.clone(),
            });
        }
        out.push((group.clone(), lower_of_both_ways(rows)));
    }
    Ok(out)
}

/// With identity names, a topic on the source can hold records of both origins: the flow's own
/// mapping translates what was written there, the reverse flow's what came from the other side,
/// and both name the same partition on the other side. Its records are interleaved differently
/// on each cluster, so no single offset is exact for both: the lower of the two translations
/// skips nothing, and may give the group records of one origin again.
fn lower_of_both_ways(rows: Vec<TranslatedOffset>) -> Vec<TranslatedOffset> {
    let mut out: Vec<TranslatedOffset> = Vec::with_capacity(rows.len());
    for row in rows {
        let same = |o: &&mut TranslatedOffset| {
            o.watched.target_topic == row.watched.target_topic && o.watched.partition == row.watched.partition
        };
        match out.iter_mut().find(same) {
            Some(kept) => {
                if row.translated.is_some_and(|t| kept.translated.is_none_or(|k| t < k)) {
                    *kept = row;
                }
            }
            None => out.push(row),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(back: bool, translated: Option<i64>) -> TranslatedOffset {
        TranslatedOffset {
            watched: Watched { source_topic: "orders".into(), partition: 0, target_topic: "orders".into(), back },
            committed: Some(SourceOffset(10)),
            translated: translated.map(TargetOffset),
        }
    }

    #[test]
    fn a_partition_both_ways_name_resumes_at_the_lower_translation() {
        let out = lower_of_both_ways(vec![row(false, Some(7)), row(true, Some(4))]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].translated, Some(TargetOffset(4)));
        assert!(out[0].watched.back);
        let out = lower_of_both_ways(vec![row(false, None), row(true, Some(9))]);
        assert_eq!(out[0].translated, Some(TargetOffset(9)), "a translation beats none");
    }
}
