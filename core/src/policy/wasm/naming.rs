//! [`ReplicationPolicy`] backed by a component instance, with every answer cached per topic:
//! naming is asked once per topic, never per record.

use std::collections::HashMap;
use std::sync::Mutex;

use super::error::PolicyError;
use super::instance::PolicyInstance;
use crate::policy::ReplicationPolicy;

#[derive(Default)]
struct Cache {
    remote: HashMap<(String, String), String>,
    source: HashMap<String, Option<String>>,
    upstream: HashMap<String, Option<String>>,
    internal: HashMap<String, bool>,
}

/// Topic naming by a component.
pub struct WasmNaming {
    instance: Mutex<(PolicyInstance, Cache)>,
}

impl WasmNaming {
    /// Wraps an instance whose component implements `naming`.
    pub fn new(instance: PolicyInstance) -> Self {
        Self { instance: Mutex::new((instance, Cache::default())) }
    }

    fn with<T: Clone>(
        &self,
        lookup: impl FnOnce(&mut Cache) -> Option<T>,
        call: impl FnOnce(&mut PolicyInstance) -> Result<T, PolicyError>,
        store: impl FnOnce(&mut Cache, T),
    ) -> Result<T, PolicyError> {
        let mut guard = self.instance.lock().unwrap_or_else(|p| p.into_inner());
        let (instance, cache) = &mut *guard;
        if let Some(hit) = lookup(cache) {
            return Ok(hit);
        }
        let value = call(instance)?;
        store(cache, value.clone());
        Ok(value)
    }
}

impl ReplicationPolicy for WasmNaming {
    fn format_remote_topic(&self, source_alias: &str, topic: &str) -> Result<String, PolicyError> {
        let key = (source_alias.to_string(), topic.to_string());
        self.with(
            |c| c.remote.get(&key).cloned(),
            |i| {
                i.call("naming.format-remote-topic", |b, s| {
                    b.strait_policy_naming().call_format_remote_topic(s, source_alias, topic)
                })
            },
            |c, v| {
                c.remote.insert(key.clone(), v);
            },
        )
    }

    fn topic_source(&self, topic: &str) -> Result<Option<String>, PolicyError> {
        self.with(
            |c| c.source.get(topic).cloned(),
            |i| i.call("naming.topic-source", |b, s| b.strait_policy_naming().call_topic_source(s, topic)),
            |c, v| {
                c.source.insert(topic.to_string(), v);
            },
        )
    }

    fn upstream_topic(&self, topic: &str) -> Result<Option<String>, PolicyError> {
        self.with(
            |c| c.upstream.get(topic).cloned(),
            |i| i.call("naming.upstream-topic", |b, s| b.strait_policy_naming().call_upstream_topic(s, topic)),
            |c, v| {
                c.upstream.insert(topic.to_string(), v);
            },
        )
    }

    fn is_internal_topic(&self, topic: &str) -> Result<bool, PolicyError> {
        self.with(
            |c| c.internal.get(topic).copied(),
            |i| i.call("naming.is-internal-topic", |b, s| b.strait_policy_naming().call_is_internal_topic(s, topic)),
            |c, v| {
                c.internal.insert(topic.to_string(), v);
            },
        )
    }

    fn offset_syncs_topic(&self, cluster_alias: &str) -> Result<String, PolicyError> {
        // Asked once per flow at start-up: no cache needed.
        let mut guard = self.instance.lock().unwrap_or_else(|p| p.into_inner());
        guard.0.call("naming.offset-syncs-topic", |b, s| {
            b.strait_policy_naming().call_offset_syncs_topic(s, cluster_alias)
        })
    }

    fn checkpoints_topic(&self, cluster_alias: &str) -> Result<String, PolicyError> {
        let mut guard = self.instance.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .0
            .call("naming.checkpoints-topic", |b, s| b.strait_policy_naming().call_checkpoints_topic(s, cluster_alias))
    }

    fn heartbeats_topic(&self) -> Result<String, PolicyError> {
        let mut guard = self.instance.lock().unwrap_or_else(|p| p.into_inner());
        guard.0.call("naming.heartbeats-topic", |b, s| b.strait_policy_naming().call_heartbeats_topic(s))
    }
}
