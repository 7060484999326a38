//! MM2's `IdentityReplicationPolicy` as a strait policy component: remote topics keep their
//! names (only `heartbeats` is still prefixed, so heartbeats of several sources stay apart).
//! Cycles cannot be recognised by name, so active-active needs filters or headers instead.

use std::sync::OnceLock;

use mm2_naming as rules;

wit_bindgen::generate!({ path: "../../wit", world: "policy" });

use exports::strait::policy::{lifecycle, naming};
use strait::policy::types::{HookSet, Property};

static SEPARATOR: OnceLock<String> = OnceLock::new();
static SOURCE: OnceLock<String> = OnceLock::new();

fn separator() -> &'static str {
    SEPARATOR.get().map_or(".", String::as_str)
}

fn looks_like_heartbeat(topic: &str) -> bool {
    topic.ends_with("heartbeats")
}

struct IdentityPolicy;

impl lifecycle::Guest for IdentityPolicy {
    fn init(source: String, _target: String, properties: Vec<Property>) -> Result<(), String> {
        let sep = properties.iter().find(|p| p.key == "replication.policy.separator").map_or(".", |p| p.value.as_str());
        if sep.is_empty() {
            return Err("replication.policy.separator must not be empty".into());
        }
        let _ = SEPARATOR.set(sep.to_string());
        let _ = SOURCE.set(source);
        Ok(())
    }

    fn hooks() -> HookSet {
        HookSet::NAMING
    }
}

impl naming::Guest for IdentityPolicy {
    fn format_remote_topic(source_alias: String, topic: String) -> String {
        if looks_like_heartbeat(&topic) {
            rules::format_remote_topic(separator(), &source_alias, &topic)
        } else {
            topic
        }
    }
    fn topic_source(topic: String) -> Option<String> {
        if looks_like_heartbeat(&topic) {
            rules::topic_source(separator(), &topic)
        } else {
            SOURCE.get().cloned()
        }
    }
    fn upstream_topic(topic: String) -> Option<String> {
        if looks_like_heartbeat(&topic) {
            rules::upstream_topic(separator(), &topic)
        } else {
            Some(topic)
        }
    }
    rules::mm2_internal_names!(separator);
}

// Hooks not listed by `hooks()`: strait never calls them.
strait_policy_neutral::neutral_filters!(IdentityPolicy);
strait_policy_neutral::neutral_records!(IdentityPolicy);
strait_policy_neutral::neutral_conflicts!(IdentityPolicy);

// Exported only in the component: on the host the crate is built for its unit tests.
#[cfg(target_arch = "wasm32")]
export!(IdentityPolicy);
