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

/// A schema version of the source was copied to the target's registry.
pub struct SchemaCopied<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// The subject on the source.
    pub subject: &'a str,
    /// Its version there.
    pub version: i32,
    /// The subject on the target.
    pub target_subject: &'a str,
    /// The schema's id on the source.
    pub id: u32,
    /// Its id on the target.
    pub target_id: u32,
}

impl SchemaCopied<'_> {
    /// Logs and counts.
    pub fn emit(&self) {
        info!(
            flow = self.flow,
            subject = self.subject,
            version = self.version,
            target_subject = self.target_subject,
            id = self.id,
            target_id = self.target_id,
            "schema copied to the target registry"
        );
        counter!("strait_schema_versions_copied_total", "flow" => self.flow.to_string()).increment(1);
    }
}

/// A schema id records carry that the flow does not copy: the source registry does not know it,
/// or its subjects are left out.
pub struct SchemaIdNotCopied<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// The id.
    pub id: u32,
    /// Why.
    pub reason: &'a str,
}

impl SchemaIdNotCopied<'_> {
    /// Logs once per id and flow start.
    pub fn emit(&self) {
        warn!(
            flow = self.flow,
            id = self.id,
            reason = self.reason,
            "records carry a schema id that is not copied: they pass unchanged, or stop the flow with schema.strict = true"
        );
    }
}

/// What a batch's keys and values were, for schema ids.
pub struct SchemaRecords<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// Carried an id the target registry knows (rewritten, or kept).
    pub carried: u64,
    /// Not in the wire format: untouched.
    pub plain: u64,
    /// An id the source registry does not know: passed unchanged.
    pub unknown: u64,
    /// An id whose subjects the flow does not copy: passed unchanged.
    pub excluded: u64,
}

impl SchemaRecords<'_> {
    /// Counts by outcome: `carried` (an id the target knows), `plain` (not in the wire format),
    /// `unknown_id`, `excluded_subject`.
    pub fn emit(&self) {
        for (outcome, n) in [
            ("carried", self.carried),
            ("plain", self.plain),
            ("unknown_id", self.unknown),
            ("excluded_subject", self.excluded),
        ] {
            if n > 0 {
                counter!("strait_schema_records_total", "flow" => self.flow.to_string(), "outcome" => outcome)
                    .increment(n);
            }
        }
    }
}
