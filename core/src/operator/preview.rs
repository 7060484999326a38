//! What a flow's filters keep (`strait validate`): the source's topics, groups and topic config
//! keys, each kept or left out with the reason, by the same rules and policy components the flow
//! runs with.

use std::collections::BTreeMap;

use super::SOURCE_TIMEOUT;
use crate::checkpoints::Groups;
use crate::cluster::{check_reachable, ClusterAdmin};
use crate::config::{Config, FlowConfig};
use crate::flows::FlowError;
use crate::pipeline::StageError;
use crate::policy::{FlowPolicy, PolicyEngine, WasmNaming};
use crate::topics::topic_verdict;

/// A name and why it is left out; `None` when the flow keeps it.
pub type Verdict = (String, Option<&'static str>);

/// What one flow's filters keep on its source cluster.
#[derive(Debug, Default)]
pub struct FilterPreview {
    /// Every topic of the source.
    pub topics: Vec<Verdict>,
    /// Every consumer group of the source.
    pub groups: Vec<Verdict>,
    /// Every config key the kept topics have that could be synced (read-only, secret and
    /// broker-local keys are never synced and not listed).
    pub config_keys: Vec<Verdict>,
}

/// Reads `flow`'s source and applies the flow's topic, group and config filters (regexes and
/// the policy component's) to what it finds.
pub fn preview_filters(config: &Config, flow: &FlowConfig) -> Result<FilterPreview, FlowError> {
    let source = config.cluster(&flow.source).ok_or_else(|| StageError::Config {
        flow: flow.name(),
        key: "clusters".into(),
        reason: format!("does not list `{}`", flow.source),
    })?;
    let policy = FlowPolicy::load(PolicyEngine::shared()?, flow)?;
    let naming = WasmNaming::new(policy.naming.instantiate(flow)?);
    let filters = policy.filters(flow)?;
    let admin = ClusterAdmin::connect(source, &flow.source_admin)?;
    check_reachable(&admin, source, SOURCE_TIMEOUT)?;

    let mut out = FilterPreview::default();
    let mut names: Vec<String> = admin.partition_counts()?.into_keys().collect();
    names.sort();
    for topic in names {
        let verdict = topic_verdict(&topic, &flow.topics, &naming, &filters, flow.target.as_str())?;
        out.topics.push((topic, verdict));
    }

    let mut groups = Groups::connect(source, &flow.consumer)?.list()?;
    groups.sort();
    for group in groups.into_iter().filter(|g| g != "strait") {
        let verdict = match &flow.checkpoints {
            None => Some("emit.checkpoints.enabled = false"),
            Some(c) if !c.groups.matches(&group) => Some("groups / groups.exclude"),
            Some(_) if !filters.group(&group)? => Some("filters.group"),
            Some(_) => None,
        };
        out.groups.push((group, verdict));
    }

    let kept: Vec<&str> = out.topics.iter().filter(|(_, v)| v.is_none()).map(|(t, _)| t.as_str()).collect();
    let mut keys: BTreeMap<String, Option<&'static str>> = BTreeMap::new();
    for entries in admin.topic_configs(&kept)?.into_values().flatten() {
        for e in entries
            .into_iter()
            .filter(|e| !e.is_read_only && !e.is_sensitive && e.source != rdkafka::admin::ConfigSource::StaticBroker)
        {
            if keys.contains_key(&e.name) {
                continue;
            }
            let verdict = if !flow.topic_configs.keeps(&e.name) {
                Some("config.properties.exclude")
            } else if !filters.topic_config(&e.name)? {
                Some("filters.topic-config")
            } else {
                None
            };
            keys.insert(e.name, verdict);
        }
    }
    out.config_keys = keys.into_iter().collect();
    Ok(out)
}
