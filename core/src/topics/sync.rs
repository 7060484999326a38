//! What follows the source besides records, round by round: topic configs (every
//! `sync.topic.configs.interval.seconds`) and topic ACLs (every `sync.topic.acls.interval.seconds`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::{ConfigEntry, ConfigSource};

use super::acls::remote_acls;
use super::configs::{at_creation, changes, Origin, TopicConfig};
use crate::cluster::{ClusterAdmin, ClusterError};
use crate::config::TopicConfigSync;
use crate::events::{AclSyncUnavailable, FlowRetrying, TopicAclsSynced, TopicConfigsSynced};
use crate::pipeline::Periodic;
use crate::policy::{PolicyError, WasmFilters};
use crate::site::Site;

/// The topics a flow replicates, source name → remote name, kept by discovery and read by the
/// sync rounds.
#[derive(Clone, Default)]
pub struct Replicated(Arc<Mutex<BTreeMap<String, String>>>);

impl Replicated {
    pub(super) fn insert(&self, topic: &str, remote: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(topic.to_string(), remote.to_string());
    }

    pub(super) fn remove(&self, topic: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(topic);
    }

    /// A copy of the current map.
    pub fn snapshot(&self) -> BTreeMap<String, String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Why a sync round failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// A cluster refused or did not answer.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The config filter failed.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The source did not describe a topic's configs.
    #[error(
        "cannot read the configs of source topic `{topic}` ({reason}); grant strait's principal DESCRIBE_CONFIGS on it"
    )]
    Describe {
        /// The source topic.
        topic: String,
        /// What the cluster said.
        reason: String,
    },
}

fn origin(source: &ConfigSource) -> Origin {
    match source {
        ConfigSource::Default => Origin::Default,
        ConfigSource::StaticBroker => Origin::StaticBroker,
        ConfigSource::DynamicTopic => Origin::Topic,
        ConfigSource::DynamicBroker | ConfigSource::DynamicDefaultBroker | ConfigSource::Unknown => Origin::Broker,
    }
}

fn converted(entries: Vec<ConfigEntry>) -> Vec<TopicConfig> {
    entries
        .into_iter()
        .map(|e| TopicConfig {
            origin: origin(&e.source),
            name: e.name,
            value: e.value,
            read_only: e.is_read_only,
            sensitive: e.is_sensitive,
        })
        .collect()
}

/// The configs the remote topic of `topic` is created with (`config.properties.exclude`,
/// `use.defaults.from` and the policy's `filters.topic-config` applied).
pub fn creation_configs(
    source: &ClusterAdmin,
    topic: &str,
    sync: &TopicConfigSync,
    filters: &WasmFilters,
) -> Result<Vec<(String, String)>, SyncError> {
    // A topic created without its configs would be a delete-policy copy of a compacted topic:
    // no configs, no topic (this round).
    let entries = match source.topic_configs(&[topic])?.remove(topic) {
        Some(Ok(entries)) => converted(entries),
        Some(Err(reason)) => return Err(SyncError::Describe { topic: topic.to_string(), reason }),
        None => return Err(SyncError::Describe { topic: topic.to_string(), reason: "no answer".into() }),
    };
    Ok(at_creation(&entries, sync, &mut |key| filters.topic_config(key))?)
}

/// The config and ACL rounds of one flow, on the shared periodic thread.
pub struct TopicSync {
    /// `source->target`.
    pub flow: String,
    /// The source cluster's admin client (shared with discovery).
    pub source: Arc<ClusterAdmin>,
    /// The target cluster's admin client (shared with discovery).
    pub target: Arc<ClusterAdmin>,
    /// The topics the flow replicates.
    pub replicated: Replicated,
    /// Which keys follow, and how often; `interval: None` turns the config rounds off.
    pub configs: TopicConfigSync,
    /// The flow's policy filters (`filters.topic-config`).
    pub filters: Arc<WasmFilters>,
    /// How often ACLs follow; `None` turns ACL rounds off.
    pub acls: Option<Duration>,
    /// When each kind of round is next due.
    pub next: (Instant, Instant),
}

impl TopicSync {
    /// The flow's topic config and ACL sync, when either is on: the configs and ACLs are the
    /// flow's, not a task's, so only the owner of task 0 keeps them in line. `replicated` are
    /// the remote topics discovery keeps.
    pub fn for_flow(site: &Site<'_>, replicated: Replicated) -> Option<Self> {
        let flow = site.flow;
        let wanted = flow.topic_configs.interval.is_some() || flow.acl_sync.is_some();
        (site.leads() && wanted).then(|| Self {
            flow: site.name.clone(),
            source: site.source_admin.clone(),
            target: site.target_admin.clone(),
            replicated,
            configs: flow.topic_configs.clone(),
            filters: site.filters.clone(),
            acls: flow.acl_sync,
            next: (Instant::now() + flow.topic_configs.interval.unwrap_or_default(), Instant::now()),
        })
    }
}

impl TopicSync {
    /// One config round: every replicated topic whose target configs differ is altered. A topic
    /// that cannot be read or changed is reported and left for the next round; the others go on.
    pub fn sync_configs(&self) -> Result<usize, SyncError> {
        let replicated = self.replicated.snapshot();
        let topics: Vec<&str> = replicated.keys().map(String::as_str).collect();
        let remotes: Vec<&str> = replicated.values().map(String::as_str).collect();
        let mut source = self.source.topic_configs(&topics)?;
        let mut target = self.target.topic_configs(&remotes)?;
        let mut altered = 0;
        for (topic, remote) in &replicated {
            let (Some(from), Some(Ok(to))) = (source.remove(topic), target.remove(remote)) else {
                continue;
            };
            match from
                .map_err(|reason| SyncError::Describe { topic: topic.clone(), reason })
                .and_then(|from| self.sync_topic(from, to, remote))
            {
                Ok(true) => altered += 1,
                Ok(false) => {}
                Err(e) => {
                    FlowRetrying { flow: &self.flow, what: &format!("topic config sync of `{remote}`: {e}") }.emit()
                }
            }
        }
        Ok(altered)
    }

    /// Brings one remote topic's configs in line; whether anything changed.
    fn sync_topic(&self, from: Vec<ConfigEntry>, to: Vec<ConfigEntry>, remote: &str) -> Result<bool, SyncError> {
        let ops = changes(&converted(from), &converted(to), &self.configs, &mut |key| self.filters.topic_config(key))?;
        if ops.is_empty() {
            return Ok(false);
        }
        self.target.alter_topic_configs(remote, &ops)?;
        let keys: Vec<&str> = ops.iter().map(|(k, _)| k.as_str()).collect();
        TopicConfigsSynced { flow: &self.flow, topic: remote, keys: &keys.join(", ") }.emit();
        Ok(true)
    }

    /// One ACL round: the bindings the target lacks are created; none is ever deleted (as in MM2).
    pub fn sync_acls(&self) -> Result<usize, SyncError> {
        let wanted = remote_acls(&self.source.topic_acls()?, &self.replicated.snapshot());
        if wanted.is_empty() {
            return Ok(0);
        }
        let existing = self.target.topic_acls()?;
        let missing: Vec<_> = wanted.into_iter().filter(|a| !existing.contains(a)).collect();
        if !missing.is_empty() {
            self.target.create_topic_acls(&missing)?;
            TopicAclsSynced { flow: &self.flow, created: missing.len() }.emit();
        }
        Ok(missing.len())
    }
}

impl Periodic for TopicSync {
    fn tick(&mut self) {
        let now = Instant::now();
        if let Some(interval) = self.configs.interval.filter(|_| now >= self.next.0) {
            if let Err(e) = self.sync_configs() {
                FlowRetrying { flow: &self.flow, what: &format!("topic config sync: {e}") }.emit();
            }
            self.next.0 = Instant::now() + interval;
        }
        if let Some(interval) = self.acls.filter(|_| now >= self.next.1) {
            match self.sync_acls() {
                Err(e) if e.to_string().contains("SECURITY_DISABLED") => {
                    AclSyncUnavailable { flow: &self.flow, reason: &e.to_string() }.emit();
                    self.acls = None;
                }
                Err(e) => FlowRetrying { flow: &self.flow, what: &format!("topic ACL sync: {e}") }.emit(),
                Ok(_) => {}
            }
            self.next.1 = Instant::now() + interval;
        }
    }
}
