//! Replication policy: how remote topics are named and which topics are internal.
//!
//! The contract mirrors MM2's `ReplicationPolicy`. These native implementations are the
//! reference the WASM components of the next milestone must match; the pipeline only sees the
//! [`ReplicationPolicy`] trait.

use crate::config::{FlowConfig, PolicyKind};

/// Names remote topics and recognises internal ones, as MM2's `ReplicationPolicy` does.
pub trait ReplicationPolicy: Send + Sync {
    /// The name `topic` of cluster `source_alias` gets on the target.
    fn format_remote_topic(&self, source_alias: &str, topic: &str) -> String;
    /// The alias of the cluster a remote topic came from, or `None` for a local topic.
    fn topic_source(&self, topic: &str) -> Option<String>;
    /// The topic's name on the cluster it came from, or `None` for a local topic.
    fn upstream_topic(&self, topic: &str) -> Option<String>;
    /// Whether a topic belongs to Kafka or to a replicator and must never be mirrored.
    fn is_internal_topic(&self, topic: &str) -> bool {
        topic.ends_with(".internal") || topic.ends_with("-internal") || topic.starts_with("__") || topic.starts_with('.')
    }
}

/// Builds the policy a flow's `replication.policy.class` selects.
pub fn for_flow(flow: &FlowConfig) -> Box<dyn ReplicationPolicy> {
    match flow.policy {
        PolicyKind::Default => Box::new(DefaultPolicy { separator: flow.separator.clone() }),
        PolicyKind::Identity => Box::new(IdentityPolicy { source_alias: flow.source.to_string() }),
    }
}

/// MM2's `DefaultReplicationPolicy`: `us-east.orders` for `orders` from `us-east`.
#[derive(Debug, Clone)]
pub struct DefaultPolicy {
    /// `replication.policy.separator`.
    pub separator: String,
}

impl ReplicationPolicy for DefaultPolicy {
    fn format_remote_topic(&self, source_alias: &str, topic: &str) -> String {
        format!("{source_alias}{}{topic}", self.separator)
    }

    fn topic_source(&self, topic: &str) -> Option<String> {
        // Java's String.split drops trailing empty strings, so `a.` has one part, not two.
        let mut parts = topic.split(self.separator.as_str());
        let first = parts.next()?;
        parts.any(|p| !p.is_empty()).then(|| first.to_string())
    }

    fn upstream_topic(&self, topic: &str) -> Option<String> {
        let source = self.topic_source(topic)?;
        Some(topic[source.len() + self.separator.len()..].to_string())
    }
}

/// MM2's `IdentityReplicationPolicy`: remote topics keep their names, so cycles cannot be told
/// apart by name and active-active needs other means.
#[derive(Debug, Clone)]
pub struct IdentityPolicy {
    /// The flow's source alias, which MM2's identity policy reports as every topic's source.
    pub source_alias: String,
}

impl ReplicationPolicy for IdentityPolicy {
    fn format_remote_topic(&self, _source_alias: &str, topic: &str) -> String {
        topic.to_string()
    }
    fn topic_source(&self, _topic: &str) -> Option<String> {
        None
    }
    fn upstream_topic(&self, _topic: &str) -> Option<String> {
        None
    }
}

/// MM2's `isCycle`: whether `topic` already came from `target_alias`, directly or through
/// other clusters, so mirroring it there would loop.
pub fn is_cycle(policy: &dyn ReplicationPolicy, topic: &str, target_alias: &str) -> bool {
    let mut current = topic.to_string();
    // Each step strips one alias, so the depth is bounded by the name's length.
    loop {
        match policy.topic_source(&current) {
            None => return false,
            Some(source) if source == target_alias => return true,
            Some(_) => match policy.upstream_topic(&current) {
                Some(up) if up != current => current = up,
                _ => return false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default() -> DefaultPolicy {
        DefaultPolicy { separator: ".".into() }
    }

    #[test]
    fn default_policy_names_like_mm2() {
        let p = default();
        assert_eq!(p.format_remote_topic("us-east", "orders"), "us-east.orders");
        assert_eq!(p.topic_source("us-east.orders").as_deref(), Some("us-east"));
        assert_eq!(p.upstream_topic("us-west.us-east.orders").as_deref(), Some("us-east.orders"));
        assert_eq!(p.topic_source("orders"), None);
        assert_eq!(p.topic_source("orders."), None);
        let dash = DefaultPolicy { separator: "__".into() };
        assert_eq!(dash.format_remote_topic("a", "t.x"), "a__t.x");
        assert_eq!(dash.upstream_topic("a__t.x").as_deref(), Some("t.x"));
    }

    #[test]
    fn internal_topics_and_cycles() {
        let p = default();
        for t in ["__consumer_offsets", "mm2-offsets.a.internal", "connect-internal", ".hidden"] {
            assert!(p.is_internal_topic(t), "{t}");
        }
        assert!(!p.is_internal_topic("heartbeats"));
        assert!(is_cycle(&p, "us-west.orders", "us-west"));
        assert!(is_cycle(&p, "us-east.us-west.orders", "us-west"));
        assert!(!is_cycle(&p, "us-east.orders", "us-west"));
        assert!(!is_cycle(&IdentityPolicy { source_alias: "a".into() }, "b.orders", "b"));
    }
}
