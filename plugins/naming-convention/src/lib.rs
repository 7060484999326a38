//! An example user policy built on the filter hooks: only topics and consumer groups whose
//! names follow a convention (start with an agreed prefix) are replicated, and one topic config
//! key is never synced, so the target keeps its own value. It implements only `topic-filter`,
//! `group-filter` and `config-filter`, so strait keeps its built-in naming for the flow and
//! forwards every record of the topics it keeps unchanged.
//!
//! Its keys, given in `mm2.properties` next to `replication.policy.wasm`:
//! - `replication.policy.naming-convention.prefixes` (default `shared.`): prefixes separated by
//!   commas; a source topic is replicated only if its name starts with one of them;
//! - `replication.policy.naming-convention.groups.prefixes` (default: the topic prefixes): the
//!   same for consumer groups; a group no prefix matches gets no checkpoints and no offset sync;
//! - `replication.policy.naming-convention.drop.config` (default `retention.ms`): this topic
//!   config key is never synced (e.g. so the DR site keeps its own retention); an empty value
//!   drops nothing.
//!
//! An empty prefix list would replicate nothing, so `init` refuses it.
//!
//! These filters narrow what `topics` / `topics.exclude`, `groups` / `groups.exclude` and
//! `config.properties.exclude` already allow; strait caches each answer per name until the
//! policy is reloaded.

use std::sync::OnceLock;

wit_bindgen::generate!({ path: "../../wit", world: "policy" });

use exports::strait::policy::{filters, lifecycle};
use strait::policy::types::{HookSet, Property};

/// The topic prefixes key.
pub const PREFIXES: &str = "replication.policy.naming-convention.prefixes";
/// The group prefixes key.
pub const GROUP_PREFIXES: &str = "replication.policy.naming-convention.groups.prefixes";
/// The topic config key that is never synced.
pub const DROP_CONFIG: &str = "replication.policy.naming-convention.drop.config";

/// Default of [`PREFIXES`].
pub const DEFAULT_PREFIXES: &str = "shared.";
/// Default of [`DROP_CONFIG`].
pub const DEFAULT_DROP_CONFIG: &str = "retention.ms";

/// What the filters decide from; read once by `init`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Convention {
    /// A topic is replicated if its name starts with one of these.
    pub topic_prefixes: Vec<String>,
    /// A group's offsets are synced if its name starts with one of these.
    pub group_prefixes: Vec<String>,
    /// The topic config key never synced; `None` syncs every key.
    pub drop_config: Option<String>,
}

impl Convention {
    /// Reads the plugin's keys (other keys are ignored); an error names the key at fault.
    pub fn parse(properties: &[(&str, &str)]) -> Result<Self, String> {
        let get = |key: &str| properties.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| *v);
        let topic_prefixes = prefix_list(PREFIXES, get(PREFIXES).unwrap_or(DEFAULT_PREFIXES))?;
        let group_prefixes = match get(GROUP_PREFIXES) {
            Some(list) => prefix_list(GROUP_PREFIXES, list)?,
            None => topic_prefixes.clone(),
        };
        let drop_config =
            Some(get(DROP_CONFIG).unwrap_or(DEFAULT_DROP_CONFIG).trim()).filter(|k| !k.is_empty()).map(String::from);
        Ok(Convention { topic_prefixes, group_prefixes, drop_config })
    }

    /// `filters.topic`: whether the source topic is replicated.
    pub fn keeps_topic(&self, topic: &str) -> bool {
        starts_with_any(topic, &self.topic_prefixes)
    }

    /// `filters.group`: whether the consumer group gets checkpoints and offset sync.
    pub fn keeps_group(&self, group: &str) -> bool {
        starts_with_any(group, &self.group_prefixes)
    }

    /// `filters.topic-config`: whether the topic config key is synced to the target.
    pub fn keeps_config(&self, key: &str) -> bool {
        self.drop_config.as_deref() != Some(key)
    }
}

/// Splits a comma-separated list of prefixes, trimming blanks; refuses a list with none.
fn prefix_list(key: &str, value: &str) -> Result<Vec<String>, String> {
    let prefixes: Vec<String> = value.split(',').map(str::trim).filter(|p| !p.is_empty()).map(String::from).collect();
    if prefixes.is_empty() {
        return Err(format!(
            "{key} lists no prefix, so nothing would be replicated; give at least one (e.g. `{key} = {DEFAULT_PREFIXES}`)"
        ));
    }
    Ok(prefixes)
}

fn starts_with_any(name: &str, prefixes: &[String]) -> bool {
    prefixes.iter().any(|p| name.starts_with(p.as_str()))
}

static CONVENTION: OnceLock<Convention> = OnceLock::new();

/// The settings `init` read. strait calls `init` before any hook, so a missing value is a host
/// bug; trapping stops the flow rather than guessing what to replicate.
fn convention() -> &'static Convention {
    CONVENTION.get().expect("init was not called")
}

struct NamingConvention;

impl lifecycle::Guest for NamingConvention {
    fn init(_source: String, _target: String, properties: Vec<Property>) -> Result<(), String> {
        let pairs: Vec<(&str, &str)> = properties.iter().map(|p| (p.key.as_str(), p.value.as_str())).collect();
        let _ = CONVENTION.set(Convention::parse(&pairs)?);
        Ok(())
    }

    fn hooks() -> HookSet {
        HookSet::TOPIC_FILTER | HookSet::GROUP_FILTER | HookSet::CONFIG_FILTER
    }
}

impl filters::Guest for NamingConvention {
    fn topic(topic: String) -> bool {
        convention().keeps_topic(&topic)
    }
    fn group(group: String) -> bool {
        convention().keeps_group(&group)
    }
    fn topic_config(key: String) -> bool {
        convention().keeps_config(&key)
    }
}

// Hooks not listed by `hooks()`: strait never calls them, and names remote topics with its
// built-in policy (`replication.policy.class`).
strait_policy_neutral::neutral_naming!(NamingConvention);
strait_policy_neutral::neutral_records!(NamingConvention);
strait_policy_neutral::neutral_conflicts!(NamingConvention);

// Exported only in the component: on the host the crate is built for its unit tests.
#[cfg(target_arch = "wasm32")]
export!(NamingConvention);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_keep_shared_names_and_drop_retention() {
        let c = Convention::parse(&[("replication.policy.separator", ".")]).unwrap();
        assert_eq!(c.topic_prefixes, vec!["shared.".to_string()]);
        assert_eq!(c.group_prefixes, c.topic_prefixes);
        assert!(c.keeps_topic("shared.orders"));
        assert!(!c.keeps_topic("orders"));
        assert!(!c.keeps_topic("shared"));
        assert!(c.keeps_group("shared.billing"));
        assert!(!c.keeps_group("billing"));
        assert!(!c.keeps_config("retention.ms"));
        assert!(c.keeps_config("retention.bytes"));
        assert!(c.keeps_config("cleanup.policy"));
    }

    #[test]
    fn several_prefixes_trimmed() {
        let c = Convention::parse(&[(PREFIXES, " shared. , global-,, ")]).unwrap();
        assert_eq!(c.topic_prefixes, vec!["shared.".to_string(), "global-".to_string()]);
        assert!(c.keeps_topic("global-prices"));
        assert!(c.keeps_topic("shared.orders"));
        assert!(!c.keeps_topic("local.orders"));
        assert!(c.keeps_group("global-pricing-app"));
    }

    #[test]
    fn groups_have_their_own_list() {
        let c = Convention::parse(&[(PREFIXES, "shared."), (GROUP_PREFIXES, "dr-")]).unwrap();
        assert!(c.keeps_topic("shared.orders"));
        assert!(!c.keeps_group("shared.billing"));
        assert!(c.keeps_group("dr-billing"));
    }

    #[test]
    fn drop_config_is_configurable_and_can_be_off() {
        let c = Convention::parse(&[(DROP_CONFIG, "retention.bytes")]).unwrap();
        assert!(c.keeps_config("retention.ms"));
        assert!(!c.keeps_config("retention.bytes"));
        let c = Convention::parse(&[(DROP_CONFIG, "")]).unwrap();
        assert_eq!(c.drop_config, None);
        assert!(c.keeps_config("retention.ms"));
    }

    #[test]
    fn refuses_an_empty_prefix_list_naming_the_key() {
        let err = Convention::parse(&[(PREFIXES, "")]).unwrap_err();
        assert!(err.starts_with(PREFIXES), "{err}");
        let err = Convention::parse(&[(PREFIXES, " , ")]).unwrap_err();
        assert!(err.starts_with(PREFIXES), "{err}");
        let err = Convention::parse(&[(GROUP_PREFIXES, "")]).unwrap_err();
        assert!(err.starts_with(GROUP_PREFIXES), "{err}");
    }
}
