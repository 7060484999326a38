//! Which topic configs a remote topic gets from its source, by MM2's rules
//! (`MirrorSourceConnector.targetConfig` and its incremental sync): read-only, sensitive and
//! static-broker keys never; keys excluded by `config.properties.exclude` or refused by the
//! policy's `filters.topic-config` never; keys at their default on the source are deleted on the
//! target, so they fall back to the target's default (or set to the source's default with
//! `use.defaults.from = source`).

use crate::cluster::ConfigOp;
use crate::config::TopicConfigSync;
use crate::policy::PolicyError;

/// Where a config's value comes from, as the cluster describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The broker's built-in default.
    Default,
    /// The broker's `server.properties`: a property of that broker, never copied.
    StaticBroker,
    /// Set on the topic itself.
    Topic,
    /// A dynamic broker setting, or unknown.
    Broker,
}

/// One config of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfig {
    /// The key, e.g. `cleanup.policy`.
    pub name: String,
    /// Its value; `None` when the broker hides it.
    pub value: Option<String>,
    /// Where the value comes from.
    pub origin: Origin,
    /// Whether the broker refuses to change it.
    pub read_only: bool,
    /// Whether it holds a secret.
    pub sensitive: bool,
}

/// Asks the policy whether a key is synced (`filters.topic-config`).
pub type KeepKey<'a> = dyn FnMut(&str) -> Result<bool, PolicyError> + 'a;

/// The source configs that may follow the source at all.
fn candidates<'a>(
    source: &'a [TopicConfig],
    sync: &TopicConfigSync,
    keep: &mut KeepKey<'_>,
) -> Result<Vec<&'a TopicConfig>, PolicyError> {
    let mut out = Vec::new();
    for c in source {
        if c.read_only || c.sensitive || c.origin == Origin::StaticBroker || !sync.keeps(&c.name) {
            continue;
        }
        if keep(&c.name)? {
            out.push(c);
        }
    }
    Ok(out)
}

/// The configs a remote topic is created with: the source's own values (and its defaults with
/// `use.defaults.from = source`).
pub fn at_creation(
    source: &[TopicConfig],
    sync: &TopicConfigSync,
    keep: &mut KeepKey<'_>,
) -> Result<Vec<(String, String)>, PolicyError> {
    Ok(candidates(source, sync, keep)?
        .into_iter()
        .filter(|c| c.origin != Origin::Default || sync.defaults_from_source)
        .filter_map(|c| Some((c.name.clone(), c.value.clone()?)))
        .collect())
}

/// The changes that bring `target` in line with `source`; empty when they agree, so a round
/// where nothing changed alters nothing.
pub fn changes(
    source: &[TopicConfig],
    target: &[TopicConfig],
    sync: &TopicConfigSync,
    keep: &mut KeepKey<'_>,
) -> Result<Vec<(String, ConfigOp)>, PolicyError> {
    let mut out = Vec::new();
    for c in candidates(source, sync, keep)? {
        let on_target = target.iter().find(|t| t.name == c.name);
        if c.origin == Origin::Default && !sync.defaults_from_source {
            if on_target.is_some_and(|t| t.origin == Origin::Topic) {
                out.push((c.name.clone(), ConfigOp::Delete));
            }
        } else if let Some(value) = &c.value {
            if on_target.and_then(|t| t.value.as_ref()) != Some(value) {
                out.push((c.name.clone(), ConfigOp::Set(value.clone())));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn sync(extra: &str) -> TopicConfigSync {
        let text =
            format!("clusters = a, b\na.bootstrap.servers = h\nb.bootstrap.servers = h\na->b.enabled = true\n{extra}");
        Config::parse(&text).unwrap().flows.remove(0).topic_configs
    }

    fn entry(name: &str, value: &str, origin: Origin) -> TopicConfig {
        TopicConfig { name: name.into(), value: Some(value.into()), origin, read_only: false, sensitive: false }
    }

    fn keep_all() -> impl FnMut(&str) -> Result<bool, PolicyError> {
        |_| Ok(true)
    }

    #[test]
    fn creation_copies_what_the_source_set_and_nothing_mm2_excludes() {
        let source = vec![
            entry("cleanup.policy", "compact", Origin::Topic),
            entry("retention.ms", "123456789", Origin::Topic),
            entry("min.insync.replicas", "2", Origin::Topic),
            entry("segment.bytes", "1073741824", Origin::Default),
            entry("log.dirs", "/x", Origin::StaticBroker),
            TopicConfig { sensitive: true, ..entry("secret", "s", Origin::Topic) },
            TopicConfig { read_only: true, ..entry("fixed", "f", Origin::Topic) },
        ];
        let got = at_creation(&source, &sync(""), &mut keep_all()).unwrap();
        assert_eq!(got, vec![("cleanup.policy".into(), "compact".into()), ("retention.ms".into(), "123456789".into())]);
        let from_source = at_creation(&source, &sync("use.defaults.from = source\n"), &mut keep_all()).unwrap();
        assert!(from_source.contains(&("segment.bytes".into(), "1073741824".into())), "{from_source:?}");
    }

    #[test]
    fn a_key_deleted_on_the_source_is_deleted_on_the_target_and_falls_back_to_its_default() {
        // MM2's vector: retention.bytes set, then deleted on the source, ends at -1 on the target.
        let target =
            vec![entry("retention.bytes", "1000", Origin::Topic), entry("cleanup.policy", "delete", Origin::Default)];
        let source =
            vec![entry("retention.bytes", "-1", Origin::Default), entry("cleanup.policy", "compact", Origin::Topic)];
        let ops = changes(&source, &target, &sync(""), &mut keep_all()).unwrap();
        assert_eq!(
            ops,
            vec![
                ("retention.bytes".into(), ConfigOp::Delete),
                ("cleanup.policy".into(), ConfigOp::Set("compact".into()))
            ]
        );
        let settled =
            vec![entry("retention.bytes", "-1", Origin::Default), entry("cleanup.policy", "compact", Origin::Topic)];
        assert!(
            changes(&source, &settled, &sync(""), &mut keep_all()).unwrap().is_empty(),
            "nothing to do once they agree"
        );
        let from_source = changes(&source, &target, &sync("use.defaults.from = source\n"), &mut keep_all()).unwrap();
        assert!(from_source.contains(&("retention.bytes".into(), ConfigOp::Set("-1".into()))), "{from_source:?}");
    }

    #[test]
    fn the_policy_is_asked_only_about_keys_the_exclude_list_lets_through() {
        let source = vec![
            entry("retention.ms", "5", Origin::Topic),
            entry("min.insync.replicas", "2", Origin::Topic),
            entry("cleanup.policy", "compact", Origin::Topic),
        ];
        let mut asked = Vec::new();
        let mut keep = |k: &str| {
            asked.push(k.to_string());
            Ok(k != "retention.ms")
        };
        let got = at_creation(&source, &sync(""), &mut keep).unwrap();
        assert_eq!(got, vec![("cleanup.policy".into(), "compact".into())]);
        assert_eq!(asked, vec!["retention.ms".to_string(), "cleanup.policy".to_string()]);
    }
}
