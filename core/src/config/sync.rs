//! MM2's keys for what follows the source besides records: topic configs
//! (`sync.topic.configs.*`, `config.properties.exclude`, `use.defaults.from`) and topic ACLs
//! (`sync.topic.acls.*`).

use std::time::Duration;

use regex::Regex;

use super::flow::{whole_name_regex, FlowScope};
use super::ConfigError;

/// MM2's `DefaultConfigPropertyFilter` default for `config.properties.exclude`, as Kafka 4.3
/// ships it. Its two `log.message.timestamp.*` entries are broker key names, so (as in MM2) the
/// topic keys `message.timestamp.before.max.ms` and `message.timestamp.after.max.ms` are synced.
pub const DEFAULT_CONFIG_PROPERTIES_EXCLUDE: &str =
    "follower.replication.throttled.replicas, leader.replication.throttled.replicas, \
message.timestamp.difference.max.ms, log.message.timestamp.before.max.ms, log.message.timestamp.after.max.ms, \
message.timestamp.type, unclean.leader.election.enable, min.insync.replicas";

/// strait syncs configs and ACLs every 30 s by default; MM2 every 600 s. A describe per round
/// costs the clusters one request each, and a retention change that reaches the DR site ten
/// minutes late can delete data there meanwhile.
const DEFAULT_SYNC_SECONDS: u64 = 30;

/// Which topic configs follow the source, and how often.
#[derive(Debug, Clone)]
pub struct TopicConfigSync {
    /// `sync.topic.configs.interval.seconds` when `sync.topic.configs.enabled` (default true);
    /// `None`: configs are copied when a remote topic is created, and never after.
    pub interval: Option<Duration>,
    /// `config.properties.exclude` (or MM2's older `config.properties.blacklist`), whole-name regexes.
    pub exclude: Regex,
    /// `use.defaults.from = source`: keys at their default on the source are set to the source's
    /// default value on the target. `target` (MM2's default): they fall back to the target's default.
    pub defaults_from_source: bool,
}

impl TopicConfigSync {
    /// Whether `key` passes `config.properties.exclude`.
    pub fn keeps(&self, key: &str) -> bool {
        !self.exclude.is_match(key)
    }
}

impl FlowScope<'_> {
    pub(super) fn topic_config_sync(&self) -> Result<TopicConfigSync, ConfigError> {
        let exclude = self.get("config.properties.exclude").or_else(|| self.get("config.properties.blacklist"));
        let regex =
            whole_name_regex(exclude.map_or(DEFAULT_CONFIG_PROPERTIES_EXCLUDE, |p| p.value.as_str())).map_err(|e| {
                let p = exclude.expect("the default list is valid");
                ConfigError::BadValue {
                    line: p.line,
                    key: p.key.clone(),
                    reason: format!("is not a valid list of regexes: {e}"),
                }
            })?;
        let defaults_from_source = match self.get("use.defaults.from") {
            None => false,
            Some(p) => match p.value.trim() {
                "target" => false,
                "source" => true,
                other => {
                    return Err(ConfigError::BadValue {
                        line: p.line,
                        key: p.key.clone(),
                        reason: format!("is `{other}`; use `target` (MM2's default) or `source`"),
                    })
                }
            },
        };
        Ok(TopicConfigSync {
            interval: self.sync_interval("sync.topic.configs")?,
            exclude: regex,
            defaults_from_source,
        })
    }

    pub(super) fn acl_sync(&self) -> Result<Option<Duration>, ConfigError> {
        self.sync_interval("sync.topic.acls")
    }

    /// `<what>.enabled` (default true) and `<what>.interval.seconds`.
    fn sync_interval(&self, what: &str) -> Result<Option<Duration>, ConfigError> {
        if !self.parse_or(&format!("{what}.enabled"), true)? {
            return Ok(None);
        }
        let key = format!("{what}.interval.seconds");
        let seconds: u64 = self.parse_or(&key, DEFAULT_SYNC_SECONDS)?;
        if seconds == 0 {
            let p = self.get(&key).expect("only a configured value can be 0");
            return Err(ConfigError::BadValue {
                line: p.line,
                key: p.key.clone(),
                reason: "must be greater than 0".into(),
            });
        }
        Ok(Some(Duration::from_secs(seconds)))
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::time::Duration;

    const BASE: &str = "clusters = a, b\na.bootstrap.servers = h\nb.bootstrap.servers = h\na->b.enabled = true\n";

    #[test]
    fn defaults_follow_mm2_except_the_interval() {
        let f = &Config::parse(BASE).unwrap().flows[0];
        assert_eq!(f.topic_configs.interval, Some(Duration::from_secs(30)));
        assert_eq!(f.acl_sync, Some(Duration::from_secs(30)));
        assert!(!f.topic_configs.defaults_from_source);
        for excluded in [
            "min.insync.replicas",
            "message.timestamp.type",
            "unclean.leader.election.enable",
            "leader.replication.throttled.replicas",
        ] {
            assert!(!f.topic_configs.keeps(excluded), "{excluded}");
        }
        for kept in ["cleanup.policy", "retention.ms", "retention.bytes", "segment.ms", "min.insync.replicas.x"] {
            assert!(f.topic_configs.keeps(kept), "{kept}");
        }
    }

    #[test]
    fn keys_override_per_flow_and_bad_values_name_their_line() {
        let text = format!(
            "{BASE}sync.topic.configs.interval.seconds = 600\na->b.sync.topic.acls.enabled = false\nconfig.properties.exclude = retention\\\\..*\nuse.defaults.from = source\n"
        );
        let f = &Config::parse(&text).unwrap().flows[0];
        assert_eq!(f.topic_configs.interval, Some(Duration::from_secs(600)));
        assert_eq!(f.acl_sync, None);
        assert!(f.topic_configs.defaults_from_source);
        assert!(
            !f.topic_configs.keeps("retention.ms") && f.topic_configs.keeps("min.insync.replicas"),
            "the list replaces MM2's"
        );
        let bad = Config::parse(&format!("{BASE}use.defaults.from = both\n")).unwrap_err().to_string();
        assert!(bad.contains("line 5") && bad.contains("`source`"), "{bad}");
        let zero = Config::parse(&format!("{BASE}sync.topic.configs.interval.seconds = 0\n")).unwrap_err().to_string();
        assert!(zero.contains("line 5"), "{zero}");
        let off = Config::parse(&format!("{BASE}sync.topic.configs.enabled = false\n")).unwrap();
        assert_eq!(off.flows[0].topic_configs.interval, None);
        assert!(off.warnings.is_empty(), "{:?}", off.warnings);
    }
}
