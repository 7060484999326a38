//! Replication policy: remote topic naming, internal topics, and the record hook, all from
//! WebAssembly components that implement `wit/policy.wit`.
//!
//! `strait run` embeds the `default` and `identity` components built from `plugins/`;
//! `replication.policy.wasm = path` loads a user's component. There is no native copy of a
//! policy on the data path: the pipeline sees only [`ReplicationPolicy`] and what a hook
//! answers ([`RecordVerdict`], a conflict's yes or no), both from component instances. The
//! policy works on the record level and knows nothing of the stages that ask it.

pub mod builtin;
mod routes;
mod wasm;

pub use routes::RouteGuard;

pub(crate) use wasm::modified;
pub use wasm::{
    request_reload, BatchHook, ConflictVersion, PolicyComponent, PolicyEngine, PolicyError, PolicyInstance,
    RecordVerdict, WasmFilters, WasmNaming,
};

use crate::config::FlowConfig;

/// Names remote topics and recognises internal ones, as MM2's `ReplicationPolicy` does.
pub trait ReplicationPolicy: Send + Sync {
    /// The name `topic` of cluster `source_alias` gets on the target.
    fn format_remote_topic(&self, source_alias: &str, topic: &str) -> Result<String, PolicyError>;
    /// The alias of the cluster a remote topic came from, or `None` for a local topic.
    fn topic_source(&self, topic: &str) -> Result<Option<String>, PolicyError>;
    /// The topic's name on the cluster it came from, or `None` for a local topic.
    fn upstream_topic(&self, topic: &str) -> Result<Option<String>, PolicyError>;
    /// Whether a topic belongs to Kafka or to a replicator and must never be mirrored.
    fn is_internal_topic(&self, topic: &str) -> Result<bool, PolicyError>;
    /// The heartbeats topic (MM2's `heartbeatsTopic`).
    fn heartbeats_topic(&self) -> Result<String, PolicyError>;
    /// The offset-syncs topic named after `cluster_alias` (MM2's `offsetSyncsTopic`).
    fn offset_syncs_topic(&self, cluster_alias: &str) -> Result<String, PolicyError>;
    /// The checkpoints topic of groups on `cluster_alias` (MM2's `checkpointsTopic`).
    fn checkpoints_topic(&self, cluster_alias: &str) -> Result<String, PolicyError>;
}

/// The components a flow runs: one that names topics, and optionally one with a record hook.
pub struct FlowPolicy {
    /// Names remote topics (the built-in selected by `replication.policy.class`, or the user's
    /// component when it implements naming).
    pub naming: std::sync::Arc<PolicyComponent>,
    /// The user's component, when `replication.policy.wasm` names one with a record hook.
    pub records: Option<std::sync::Arc<PolicyComponent>>,
    /// The user's component, when it resolves active-active conflicts.
    pub conflicts: Option<std::sync::Arc<PolicyComponent>>,
    /// The user's component, whenever there is one: filters are asked of each reloaded
    /// instance by the hooks it declares, so a new version that adds a filter is obeyed
    /// without a restart.
    pub filters: Option<std::sync::Arc<PolicyComponent>>,
}

impl FlowPolicy {
    /// Compiles the components `flow` asks for.
    pub fn load(engine: &PolicyEngine, flow: &FlowConfig) -> Result<Self, PolicyError> {
        let builtin = engine.builtin(flow.policy)?;
        let Some(path) = &flow.policy_wasm else {
            return Ok(Self { naming: builtin, records: None, conflicts: None, filters: None });
        };
        let user = engine.load_file(path)?;
        let hooks = user.probe_hooks(flow)?;
        Ok(Self {
            naming: if hooks.naming { user.clone() } else { builtin },
            records: hooks.records.then(|| user.clone()),
            conflicts: hooks.conflicts.then(|| user.clone()),
            filters: Some(user),
        })
    }

    /// The flow's topic, group and config filters: the user's component when it implements
    /// any, otherwise filters that keep everything.
    pub fn filters(&self, flow: &FlowConfig) -> Result<std::sync::Arc<WasmFilters>, PolicyError> {
        Ok(std::sync::Arc::new(match &self.filters {
            Some(component) => WasmFilters::new(component.clone(), flow)?,
            None => WasmFilters::keep_all(),
        }))
    }
}

/// MM2's `isCycle`: whether `topic` already came from `target_alias`, directly or through
/// other clusters, so mirroring it there would loop.
pub fn is_cycle(policy: &dyn ReplicationPolicy, topic: &str, target_alias: &str) -> Result<bool, PolicyError> {
    let mut current = topic.to_string();
    // Each step strips one alias, so the depth is bounded by the name's length.
    loop {
        match policy.topic_source(&current)? {
            None => return Ok(false),
            Some(source) if source == target_alias => return Ok(true),
            Some(_) => match policy.upstream_topic(&current)? {
                Some(up) if up != current && up.len() < current.len() => current = up,
                _ => return Ok(false),
            },
        }
    }
}

/// Policies for unit tests elsewhere in the crate.
#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;
    use crate::config::Config;

    /// A flow `us-east->us-west` with `extra` config lines.
    pub fn flow(extra: &str) -> FlowConfig {
        let text = format!("clusters = us-east, us-west\nus-east.bootstrap.servers = h:1\nus-west.bootstrap.servers = h:2\nus-east->us-west.enabled = true\n{extra}");
        Config::parse(&text).unwrap().flows.remove(0)
    }

    /// The naming of such a flow.
    pub fn naming(extra: &str) -> WasmNaming {
        let flow = flow(extra);
        let policy = FlowPolicy::load(PolicyEngine::shared().unwrap(), &flow).unwrap();
        WasmNaming::new(policy.naming.instantiate(&flow).unwrap())
    }

    /// The built-in default naming (MM2's `DefaultReplicationPolicy`).
    pub fn default_naming() -> Box<dyn ReplicationPolicy> {
        Box::new(naming(""))
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::naming;
    use super::*;

    #[test]
    fn the_default_component_names_like_mm2() {
        let p = naming("");
        assert_eq!(p.format_remote_topic("us-east", "orders").unwrap(), "us-east.orders");
        assert_eq!(p.topic_source("us-east.orders").unwrap().as_deref(), Some("us-east"));
        assert_eq!(p.upstream_topic("us-west.us-east.orders").unwrap().as_deref(), Some("us-east.orders"));
        assert_eq!(p.topic_source("orders").unwrap(), None);
        for t in
            ["__consumer_offsets", "mm2-offsets.a.internal", "connect-internal", ".hidden", "strait-offsets.a.internal"]
        {
            assert!(p.is_internal_topic(t).unwrap(), "{t}");
        }
        assert!(!p.is_internal_topic("heartbeats").unwrap());
        assert!(is_cycle(&p, "us-west.orders", "us-west").unwrap());
        assert!(is_cycle(&p, "us-east.us-west.orders", "us-west").unwrap());
        assert!(!is_cycle(&p, "us-east.orders", "us-west").unwrap());
    }

    #[test]
    fn the_separator_reaches_the_component() {
        let p = naming("replication.policy.separator = __\n");
        assert_eq!(p.format_remote_topic("a", "t.x").unwrap(), "a__t.x");
        assert_eq!(p.upstream_topic("a__t.x").unwrap().as_deref(), Some("t.x"));
    }

    #[test]
    fn the_identity_component_keeps_names_and_prefixes_only_heartbeats() {
        let p = naming("replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n");
        assert_eq!(p.format_remote_topic("us-east", "orders").unwrap(), "orders");
        assert_eq!(p.format_remote_topic("us-east", "heartbeats").unwrap(), "us-east.heartbeats");
        assert_eq!(p.topic_source("orders").unwrap().as_deref(), Some("us-east"));
        assert!(!is_cycle(&p, "orders", "us-west").unwrap());
    }

    #[test]
    fn a_file_that_is_not_a_component_is_refused_with_its_name() {
        let engine = PolicyEngine::shared().unwrap();
        let err = engine.compile("junk.wasm", b"not wasm at all").err().unwrap().to_string();
        assert!(err.contains("junk.wasm") && err.contains("not a WebAssembly component"), "{err}");
        let core_module = b"\0asm\x01\0\0\0";
        let err = engine.compile("module.wasm", core_module).err().unwrap().to_string();
        assert!(err.contains("module.wasm") && err.contains("not a WebAssembly component"), "{err}");
    }
}
