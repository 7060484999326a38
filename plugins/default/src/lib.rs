//! MM2's `DefaultReplicationPolicy` as a strait policy component: remote topics are named
//! `<source alias><separator><topic>`, and internal topics follow MM2's rules.
//!
//! This is the component `strait run` embeds and uses unless the config names another.

use std::sync::OnceLock;

use mm2_naming as rules;

wit_bindgen::generate!({ path: "../../wit", world: "policy" });

use exports::strait::policy::{lifecycle, naming};
use strait::policy::types::{HookSet, Property};

static SEPARATOR: OnceLock<String> = OnceLock::new();

fn separator() -> &'static str {
    SEPARATOR.get().map_or(".", String::as_str)
}

struct DefaultPolicy;

impl lifecycle::Guest for DefaultPolicy {
    fn init(_source: String, _target: String, properties: Vec<Property>) -> Result<(), String> {
        let sep = properties.iter().find(|p| p.key == "replication.policy.separator").map_or(".", |p| p.value.as_str());
        if sep.is_empty() {
            return Err("replication.policy.separator must not be empty".into());
        }
        let _ = SEPARATOR.set(sep.to_string());
        Ok(())
    }

    fn hooks() -> HookSet {
        HookSet::NAMING
    }
}

impl naming::Guest for DefaultPolicy {
    fn format_remote_topic(source_alias: String, topic: String) -> String {
        rules::format_remote_topic(separator(), &source_alias, &topic)
    }
    fn topic_source(topic: String) -> Option<String> {
        rules::topic_source(separator(), &topic)
    }
    fn upstream_topic(topic: String) -> Option<String> {
        rules::upstream_topic(separator(), &topic)
    }
    rules::mm2_internal_names!(separator);
}

// Hooks not listed by `hooks()`: strait never calls them.
strait_policy_neutral::neutral_filters!(DefaultPolicy);
strait_policy_neutral::neutral_records!(DefaultPolicy);
strait_policy_neutral::neutral_conflicts!(DefaultPolicy);

// Exported only in the component: on the host the crate is built for its unit tests.
#[cfg(target_arch = "wasm32")]
export!(DefaultPolicy);
