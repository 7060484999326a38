//! Events of what follows the source besides records: topic configs and ACLs.

use metrics::counter;
use tracing::{info, warn};

/// A remote topic's configs were changed to match its source topic.
pub struct TopicConfigsSynced<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// The remote topic.
    pub topic: &'a str,
    /// The keys set or deleted, comma-separated.
    pub keys: &'a str,
}

impl TopicConfigsSynced<'_> {
    /// Logs and counts.
    pub fn emit(&self) {
        info!(flow = self.flow, topic = self.topic, keys = self.keys, "topic configs synced from the source");
        counter!("strait_topic_configs_synced_total", "flow" => self.flow.to_string()).increment(1);
    }
}

/// Topic ACLs of the source were created on the target.
pub struct TopicAclsSynced<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// How many bindings were created.
    pub created: usize,
}

impl TopicAclsSynced<'_> {
    /// Logs and counts.
    pub fn emit(&self) {
        info!(flow = self.flow, created = self.created, "topic ACLs synced from the source");
        counter!("strait_topic_acls_synced_total", "flow" => self.flow.to_string()).increment(self.created as u64);
    }
}

/// A cluster of the flow has no authorizer, so ACL sync stops for the life of the flow (as MM2
/// does when it meets `SECURITY_DISABLED`).
pub struct AclSyncUnavailable<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// What the cluster said.
    pub reason: &'a str,
}

impl AclSyncUnavailable<'_> {
    /// Logs once per flow start.
    pub fn emit(&self) {
        warn!(
            flow = self.flow,
            reason = self.reason,
            "topic ACL sync is off for this flow: a cluster has no authorizer; set `sync.topic.acls.enabled = false` to silence this"
        );
    }
}
