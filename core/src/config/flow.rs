//! Resolution of parsed properties into clusters and flows, with MM2's key scopes:
//! `A->B.<key>` over top-level `<key>` for flow settings, and
//! `<alias>.<role>.<key>` over `<alias>.<key>` over top-level `<key>` for client settings.

use std::collections::BTreeMap;
use std::time::Duration;

use regex::Regex;

use super::client::{is_common_client_key, is_registry_key, ClientRole, ClientSettings, Setting};
use super::properties::Property;
use super::{default_positions_topic, ClusterAlias, ClusterConfig, Config, ConfigError, FlowConfig};

/// MM2's `DefaultTopicFilter` default for `topics.exclude`.
pub const DEFAULT_TOPICS_EXCLUDE: &str = r".*[\-\.]internal, .*\.replica, __.*";

/// MM2's `DefaultGroupFilter` default for `groups.exclude`.
pub const DEFAULT_GROUPS_EXCLUDE: &str = r"console-consumer-.*, connect-.*, __.*";

/// The keys strait acts on at flow level (after `A->B.`) or top level.
pub(super) const FLOW_KEYS: &[&str] = &[
    "enabled",
    "topics",
    "topics.exclude",
    "topics.blacklist",
    "replication.factor",
    "replication.policy.separator",
    "replication.policy.class",
    "refresh.topics.enabled",
    "refresh.topics.interval.seconds",
    "offset.flush.interval.ms",
    "offset.storage.replication.factor",
    "offset.storage.topic",
    "strait.batch.max.records",
    "strait.batch.max.bytes",
    "strait.channel.capacity",
    "strait.policy.clock",
    "emit.offset-syncs.enabled",
    "offset-syncs.topic.location",
    "offset-syncs.topic.replication.factor",
    "offset.lag.max",
    "emit.heartbeats.enabled",
    "emit.heartbeats.interval.seconds",
    "heartbeats.topic.replication.factor",
    "emit.checkpoints.enabled",
    "emit.checkpoints.interval.seconds",
    "checkpoints.topic.replication.factor",
    "groups",
    "groups.exclude",
    "groups.blacklist",
    "sync.group.offsets.enabled",
    "sync.group.offsets.interval.seconds",
    "provenance.enabled",
    "conflicts.dead.letter.topic",
    "tasks.max",
    "strait.group.session.timeout.ms",
    "exactly.once.source.support",
    "transaction.boundary.interval.ms",
    "sync.topic.configs.enabled",
    "sync.topic.configs.interval.seconds",
    "config.properties.exclude",
    "config.properties.blacklist",
    "use.defaults.from",
    "sync.topic.acls.enabled",
    "sync.topic.acls.interval.seconds",
    "schema.ids",
    "schema.subjects",
    "schema.subjects.exclude",
    "schema.versions",
    "schema.strict",
    "schema.sync.interval.seconds",
];

/// The keys strait acts on at top level only: the process's own.
pub(super) const PROCESS_KEYS: &[&str] = &[
    "clusters",
    "strait.metrics.listen",
    "strait.stage.threads",
    "strait.shutdown.timeout.ms",
    "strait.group.instance.id",
];

/// Whether strait acts on `key` at flow level. Every `replication.policy.*` key is handed to the
/// policy component, which may define its own.
fn is_flow_key(key: &str) -> bool {
    FLOW_KEYS.contains(&key) || key.starts_with("replication.policy.")
}

/// Which built-in replication policy names remote topics (`replication.policy.class`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// MM2's `DefaultReplicationPolicy`: `<source alias><separator><topic>`.
    Default,
    /// MM2's `IdentityReplicationPolicy`: the remote topic keeps its name.
    Identity,
}

/// `topics` and `topics.exclude` as MM2's `DefaultTopicFilter` applies them: each a
/// comma-separated list of regexes joined with `|`, matched against the whole topic name.
#[derive(Debug, Clone)]
pub struct TopicFilter {
    include: Regex,
    exclude: Regex,
}

impl TopicFilter {
    /// Builds a filter from the two lists as written in the config.
    ///
    /// ```
    /// let f = strait_core::config::TopicFilter::new("orders, pay.*", "").unwrap();
    /// assert!(f.matches("orders") && f.matches("payments") && !f.matches("orders2"));
    /// ```
    pub fn new(include: &str, exclude: &str) -> Result<Self, regex::Error> {
        Ok(Self { include: whole_name_regex(include)?, exclude: whole_name_regex(exclude)? })
    }

    /// Whether `topic` is listed and not excluded.
    pub fn matches(&self, topic: &str) -> bool {
        self.include.is_match(topic) && !self.exclude.is_match(topic)
    }
}

pub(super) fn whole_name_regex(list: &str) -> Result<Regex, regex::Error> {
    let parts: Vec<&str> = list.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
    if parts.is_empty() {
        // An empty list matches nothing, as Java's Pattern of "" matches only the empty name.
        return Regex::new("^$");
    }
    Regex::new(&format!("^(?:{})$", parts.join("|")))
}

/// Warns, once per written key, that `p` (whose bare key is `key`) is ignored, and says whether
/// it is an MM2 setting not supported yet or a key strait does not know at all.
fn warn_ignored(warnings: &mut BTreeMap<String, String>, key: &str, p: &Property) {
    let what = if is_known_mm2_key(key) {
        "is an MM2 setting strait does not support yet"
    } else {
        "is not a setting strait knows"
    };
    warnings.entry(p.key.clone()).or_insert_with(|| format!("line {}: `{}` {what}; it is ignored", p.line, p.key));
}

/// Known MM2 keys that strait reads but does not act on yet; each draws one warning.
fn is_known_mm2_key(key: &str) -> bool {
    key.starts_with("emit.")
        || key.starts_with("sync.")
        || key.starts_with("groups")
        || key.starts_with("checkpoints.")
        || key.starts_with("heartbeats.")
        || key.starts_with("offset-syncs.")
        || key.starts_with("config.properties.")
        || key.starts_with("topic.filter.")
        || key.starts_with("group.filter.")
        || key.starts_with("dedicated.mode.")
        || key.starts_with("refresh.groups.")
        || matches!(key, "consumer.poll.timeout.ms" | "admin.timeout.ms")
}

struct Scopes {
    top: BTreeMap<String, Property>,
    cluster: BTreeMap<(String, String), Property>,
    flow: BTreeMap<(String, String, String), Property>,
}

pub(super) fn resolve(props: Vec<Property>) -> Result<Config, ConfigError> {
    let (aliases, clusters_line) = aliases(&props)?;
    let known = aliases.join(", ");
    let mut warnings: BTreeMap<String, String> = BTreeMap::new();
    let scopes = split_scopes(&props, &aliases, &known)?;
    let clusters = clusters(&scopes, &aliases, clusters_line)?;
    warn_unsupported(&scopes, &mut warnings);
    let flows = flows(&scopes, &aliases, &mut warnings)?;
    let process = process_settings(&scopes)?;
    Ok(Config {
        clusters,
        flows,
        metrics_listen: process.metrics_listen,
        stage_threads: process.stage_threads,
        shutdown_timeout: process.shutdown_timeout,
        group_instance_id: process.group_instance_id,
        warnings: warnings.into_values().collect(),
    })
}

/// The aliases `clusters = ...` lists, and its line.
fn aliases(props: &[Property]) -> Result<(Vec<String>, usize), ConfigError> {
    let clusters_prop = props.iter().find(|p| p.key == "clusters").ok_or_else(|| {
        ConfigError::Missing(
            "no `clusters = ...` line: list the cluster aliases, e.g. `clusters = us-east, us-west`".into(),
        )
    })?;
    let aliases: Vec<String> =
        clusters_prop.value.split(',').map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect();
    if aliases.is_empty() {
        return Err(ConfigError::BadValue {
            line: clusters_prop.line,
            key: "clusters".into(),
            reason: "lists no cluster alias".into(),
        });
    }
    Ok((aliases, clusters_prop.line))
}

/// Each alias's cluster: its `bootstrap.servers`, of its own or top-level.
fn clusters(scopes: &Scopes, aliases: &[String], clusters_line: usize) -> Result<Vec<ClusterConfig>, ConfigError> {
    aliases
        .iter()
        .map(|alias| {
            let bootstrap = scopes
                .cluster
                .get(&(alias.clone(), "bootstrap.servers".into()))
                .or_else(|| scopes.top.get("bootstrap.servers"))
                .ok_or_else(|| ConfigError::MissingBootstrap { line: clusters_line, alias: alias.clone() })?;
            Ok(ClusterConfig {
                alias: ClusterAlias::new(alias.clone()),
                bootstrap_servers: bootstrap.value.clone(),
                line: bootstrap.line,
            })
        })
        .collect()
}

/// One warning for each key strait does not use, naming it and its line.
fn warn_unsupported(scopes: &Scopes, warnings: &mut BTreeMap<String, String>) {
    for ((alias, key), p) in &scopes.cluster {
        let role_key = ["consumer.", "producer.", "admin."].iter().any(|r| key.starts_with(r));
        if !(role_key || is_common_client_key(key) || is_registry_key(key)) {
            warnings.entry(p.key.clone()).or_insert_with(|| {
                format!(
                    "line {}: `{}` is not supported yet at cluster level for `{alias}`; it is ignored",
                    p.line, p.key
                )
            });
        }
    }
    for (key, p) in &scopes.top {
        let supported = PROCESS_KEYS.contains(&key.as_str()) || is_flow_key(key) || is_common_client_key(key);
        if !supported {
            warn_ignored(warnings, key, p);
        }
    }
    for ((_, _, key), p) in &scopes.flow {
        if !is_flow_key(key) {
            warn_ignored(warnings, key, p);
        }
    }
}

/// Every enabled flow; at least one must be.
fn flows(
    scopes: &Scopes,
    aliases: &[String],
    warnings: &mut BTreeMap<String, String>,
) -> Result<Vec<FlowConfig>, ConfigError> {
    let mut flows = Vec::new();
    for source in aliases {
        for target in aliases.iter().filter(|t| *t != source) {
            let flow = FlowScope { scopes, source, target };
            if flow.parse_or("enabled", false)? {
                flows.push(flow.build(warnings)?);
            }
        }
    }
    shared_positions_topic(scopes, &flows)?;
    if flows.is_empty() {
        return Err(ConfigError::Missing(format!(
            "no flow is enabled: add a line such as `{}->{}.enabled = true`",
            aliases[0],
            aliases.get(1).unwrap_or(&aliases[0])
        )));
    }
    Ok(flows)
}

/// Refuses two flows that would store their positions in one topic of one target: positions
/// are keyed by source topic and partition, so flows from two sources would overwrite each
/// other's, and both would join one group (see `crate::group::group_id`).
fn shared_positions_topic(scopes: &Scopes, flows: &[FlowConfig]) -> Result<(), ConfigError> {
    for (i, a) in flows.iter().enumerate() {
        if let Some(b) = flows[i + 1..].iter().find(|b| b.target == a.target && b.positions_topic == a.positions_topic)
        {
            let scope = FlowScope { scopes, source: b.source.as_str(), target: b.target.as_str() };
            return Err(ConfigError::BadValue {
                line: scope.get("offset.storage.topic").map_or(0, |p| p.line),
                key: "offset.storage.topic".into(),
                reason: format!(
                    "the flows {} and {} would both store their positions in `{}` on `{}`; give each flow its own (`{}.offset.storage.topic = ...`)",
                    a.name(),
                    b.name(),
                    a.positions_topic,
                    a.target,
                    b.name()
                ),
            });
        }
    }
    Ok(())
}

/// The process's own settings (`strait.*`).
struct ProcessSettings {
    metrics_listen: std::net::SocketAddr,
    stage_threads: usize,
    shutdown_timeout: Duration,
    group_instance_id: Option<String>,
}

fn process_settings(scopes: &Scopes) -> Result<ProcessSettings, ConfigError> {
    let metrics_listen = match scopes.top.get("strait.metrics.listen") {
        Some(p) => p.value.parse().map_err(|_| ConfigError::BadValue {
            line: p.line,
            key: p.key.clone(),
            reason: format!("is `{}`, not an address:port such as 127.0.0.1:9464", p.value),
        })?,
        None => std::net::SocketAddr::from(([127, 0, 0, 1], 9464)),
    };
    let stage_threads = match scopes.top.get("strait.stage.threads") {
        Some(p) => p.value.trim().parse::<usize>().ok().filter(|n| (1..=256).contains(n)).ok_or_else(|| {
            ConfigError::BadValue {
                line: p.line,
                key: p.key.clone(),
                reason: format!("is `{}`, not a thread count from 1 to 256", p.value),
            }
        })?,
        None => 4,
    };
    let shutdown_timeout = match scopes.top.get("strait.shutdown.timeout.ms") {
        Some(p) => {
            p.value.trim().parse::<u64>().ok().filter(|ms| *ms >= 100).map(Duration::from_millis).ok_or_else(|| {
                ConfigError::BadValue {
                    line: p.line,
                    key: p.key.clone(),
                    reason: format!("is `{}`, not a number of milliseconds of at least 100", p.value),
                }
            })?
        }
        None => Duration::from_secs(30),
    };
    let group_instance_id =
        scopes.top.get("strait.group.instance.id").map(|p| p.value.trim().to_string()).filter(|v| !v.is_empty());
    Ok(ProcessSettings { metrics_listen, stage_threads, shutdown_timeout, group_instance_id })
}

fn split_scopes(props: &[Property], aliases: &[String], known: &str) -> Result<Scopes, ConfigError> {
    let mut scopes = Scopes { top: BTreeMap::new(), cluster: BTreeMap::new(), flow: BTreeMap::new() };
    let unknown = |p: &Property, alias: &str| ConfigError::UnknownAlias {
        line: p.line,
        key: p.key.clone(),
        alias: alias.to_string(),
        known: known.to_string(),
    };
    for p in props {
        if let Some((source, rest)) = p.key.split_once("->") {
            let (target, key) = rest.split_once('.').ok_or_else(|| ConfigError::Malformed {
                line: p.line,
                reason: format!("`{}` has no setting after the flow; write e.g. `{}.enabled = true`", p.key, p.key),
            })?;
            for alias in [source, target] {
                if !aliases.iter().any(|a| a == alias) {
                    return Err(unknown(p, alias));
                }
            }
            scopes.flow.insert((source.into(), target.into(), key.into()), p.clone());
        } else if let Some(alias) = aliases.iter().find(|a| p.key.starts_with(&format!("{a}."))) {
            scopes.cluster.insert((alias.clone(), p.key[alias.len() + 1..].to_string()), p.clone());
        } else if let Some(alias) = p.key.strip_suffix(".bootstrap.servers") {
            return Err(unknown(p, alias));
        } else {
            scopes.top.insert(p.key.clone(), p.clone());
        }
    }
    Ok(scopes)
}

pub(super) struct FlowScope<'a> {
    scopes: &'a Scopes,
    source: &'a str,
    target: &'a str,
}

impl FlowScope<'_> {
    pub(super) fn get(&self, key: &str) -> Option<&Property> {
        self.scopes
            .flow
            .get(&(self.source.to_string(), self.target.to_string(), key.to_string()))
            .or_else(|| self.scopes.top.get(key))
    }

    /// `<alias>.<key>` of the flow's `source` or `target` cluster; no top-level fallback.
    pub(super) fn cluster_get(&self, source: bool, key: &str) -> Option<&Property> {
        let alias = if source { self.source } else { self.target };
        self.scopes.cluster.get(&(alias.to_string(), key.to_string()))
    }

    /// The flow's source and target aliases.
    pub(super) fn aliases(&self) -> (&str, &str) {
        (self.source, self.target)
    }

    pub(super) fn parse_or<T: std::str::FromStr>(&self, key: &str, default: T) -> Result<T, ConfigError> {
        match self.get(key) {
            None => Ok(default),
            Some(p) => p.value.trim().parse().map_err(|_| ConfigError::BadValue {
                line: p.line,
                key: p.key.clone(),
                reason: format!("has value `{}`, which is not a valid {}", p.value, std::any::type_name::<T>()),
            }),
        }
    }

    fn build(&self, warnings: &mut BTreeMap<String, String>) -> Result<FlowConfig, ConfigError> {
        let topics = self.name_filter("topics", DEFAULT_TOPICS_EXCLUDE)?;
        let policy = self.policy_kind()?;
        let policy_wasm = self.get("replication.policy.wasm").map(|p| std::path::PathBuf::from(p.value.trim()));
        let separator = self.separator()?;
        let positive = |key: &str, default: u64| self.positive(key, default);
        Ok(FlowConfig {
            source: ClusterAlias::new(self.source),
            target: ClusterAlias::new(self.target),
            topics,
            policy,
            policy_wasm,
            policy_properties: self.policy_properties(),
            policy_clock: self.parse_or("strait.policy.clock", false)?,
            topic_configs: self.topic_config_sync()?,
            acl_sync: self.acl_sync()?,
            offset_syncs: self.offset_syncs()?,
            checkpoints: self.checkpoints()?,
            heartbeats: if self.parse_or("emit.heartbeats.enabled", true)? {
                Some(Duration::from_secs(positive("emit.heartbeats.interval.seconds", 1)?))
            } else {
                None
            },
            heartbeats_replication_factor: self.parse_or("heartbeats.topic.replication.factor", -1)?,
            tasks: self.parse_or("tasks.max", 12u32)?.max(1),
            group_session_timeout: Duration::from_millis(self.parse_or("strait.group.session.timeout.ms", 10_000u64)?),
            exactly_once: self.exactly_once()?,
            schemas: self.schemas(warnings)?,
            transaction_interval: self.transaction_interval(positive("offset.flush.interval.ms", 1000)?)?,
            separator,
            replication_factor: self.parse_or("replication.factor", -1)?,
            refresh_topics: self.parse_or("refresh.topics.enabled", true)?,
            refresh_interval: Duration::from_secs(positive("refresh.topics.interval.seconds", 5)?),
            offset_flush_interval: Duration::from_millis(positive("offset.flush.interval.ms", 1000)?),
            offset_storage_replication_factor: self.parse_or("offset.storage.replication.factor", -1)?,
            positions_topic: self.positions_topic(),
            back_positions_topic: FlowScope { scopes: self.scopes, source: self.target, target: self.source }
                .positions_topic(),
            batch_max_records: positive("strait.batch.max.records", 2000)? as usize,
            batch_max_bytes: positive("strait.batch.max.bytes", 1 << 20)? as usize,
            channel_capacity: positive("strait.channel.capacity", 2)? as usize,
            provenance: self.provenance()?,
            dead_letter_topic: self
                .get("conflicts.dead.letter.topic")
                .map(|p| p.value.trim().to_string())
                .filter(|t| !t.is_empty()),
            consumer: self.client(self.source, ClientRole::Consumer, warnings),
            producer: self.client(self.target, ClientRole::Producer, warnings),
            source_producer: self.client(self.source, ClientRole::Producer, warnings),
            source_admin: self.client(self.source, ClientRole::Admin, warnings),
            target_admin: self.client(self.target, ClientRole::Admin, warnings),
        })
    }

    /// `offset.storage.topic`: where the flow's positions are stored on its target (default
    /// `strait-offsets.<source>.internal`).
    fn positions_topic(&self) -> String {
        self.get("offset.storage.topic")
            .map(|p| p.value.trim().to_string())
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| default_positions_topic(self.source))
    }

    /// `<key>` and `<key>.exclude` (or MM2's older `<key>.blacklist`) as MM2's default topic and
    /// group filters read them: include `.*` unless listed, exclude `default_exclude`.
    /// `replication.policy.class`: MM2's class names, with or without the package.
    fn policy_kind(&self) -> Result<PolicyKind, ConfigError> {
        let Some(p) = self.get("replication.policy.class") else { return Ok(PolicyKind::Default) };
        match p.value.trim().rsplit('.').next().unwrap_or_default() {
            "DefaultReplicationPolicy" => Ok(PolicyKind::Default),
            "IdentityReplicationPolicy" => Ok(PolicyKind::Identity),
            other => Err(ConfigError::BadValue {
                line: p.line,
                key: p.key.clone(),
                reason: format!("is `{other}`; strait has DefaultReplicationPolicy and IdentityReplicationPolicy"),
            }),
        }
    }

    /// Every `replication.policy.*` key, top-level and then the flow's own, for the policy's
    /// `init`.
    fn policy_properties(&self) -> Vec<(String, String)> {
        let mut properties: BTreeMap<String, String> = BTreeMap::new();
        for (key, p) in &self.scopes.top {
            if key.starts_with("replication.policy.") {
                properties.insert(key.clone(), p.value.clone());
            }
        }
        for ((source, target, key), p) in &self.scopes.flow {
            if source == self.source && target == self.target && key.starts_with("replication.policy.") {
                properties.insert(key.clone(), p.value.clone());
            }
        }
        properties.into_iter().collect()
    }

    /// `replication.policy.separator`, `.` unless set; never empty.
    fn separator(&self) -> Result<String, ConfigError> {
        let separator = self.get("replication.policy.separator").map(|p| p.value.clone()).unwrap_or_else(|| ".".into());
        if separator.is_empty() {
            let line = self.get("replication.policy.separator").map_or(0, |p| p.line);
            return Err(ConfigError::BadValue {
                line,
                key: "replication.policy.separator".into(),
                reason: "is empty".into(),
            });
        }
        Ok(separator)
    }

    /// A number that must be above 0.
    fn positive(&self, key: &str, default: u64) -> Result<u64, ConfigError> {
        let v: u64 = self.parse_or(key, default)?;
        if v == 0 {
            let line = self.get(key).map_or(0, |p| p.line);
            return Err(ConfigError::BadValue { line, key: key.into(), reason: "must be greater than 0".into() });
        }
        Ok(v)
    }

    /// `provenance.enabled`: `auto` (the default) decides from the naming policy.
    fn provenance(&self) -> Result<Option<bool>, ConfigError> {
        match self.get("provenance.enabled").map(|p| (p.value.trim(), p.line)) {
            None | Some(("auto", _)) => Ok(None),
            Some(("true", _)) => Ok(Some(true)),
            Some(("false", _)) => Ok(Some(false)),
            Some((_, line)) => Err(ConfigError::BadValue {
                line,
                key: "provenance.enabled".into(),
                reason: "must be true, false or auto".into(),
            }),
        }
    }

    pub(super) fn name_filter(&self, key: &str, default_exclude: &str) -> Result<TopicFilter, ConfigError> {
        let include = self.get(key).map(|p| (p.value.as_str(), p.line)).unwrap_or((".*", 0));
        let exclude = self
            .get(&format!("{key}.exclude"))
            .or_else(|| self.get(&format!("{key}.blacklist")))
            .map(|p| (p.value.as_str(), p.line))
            .unwrap_or((default_exclude, 0));
        TopicFilter::new(include.0, exclude.0).map_err(|e| ConfigError::BadValue {
            line: if whole_name_regex(include.0).is_err() { include.1 } else { exclude.1 },
            key: key.into(),
            reason: format!("is not a valid list of regexes: {e}"),
        })
    }

    /// `transaction.boundary.interval.ms`, by default `flush_ms`. Transactions time out at three
    /// times the interval, and brokers allow at most 15 minutes by default
    /// (`transaction.max.timeout.ms`), hence the 5-minute bound.
    fn transaction_interval(&self, flush_ms: u64) -> Result<Duration, ConfigError> {
        const MAX_MS: u64 = 300_000;
        let ms: u64 = self.parse_or("transaction.boundary.interval.ms", flush_ms)?;
        if ms == 0 || (ms > MAX_MS && self.exactly_once()?) {
            let (line, key) = match self.get("transaction.boundary.interval.ms") {
                Some(p) => (p.line, p.key.clone()),
                None => {
                    (self.get("offset.flush.interval.ms").map_or(0, |p| p.line), "offset.flush.interval.ms".to_string())
                }
            };
            return Err(ConfigError::BadValue {
                line,
                key,
                reason: format!("gives exactly-once a commit interval of {ms} ms; use 1 to {MAX_MS} (transactions time out at three times it)"),
            });
        }
        Ok(Duration::from_millis(ms))
    }

    /// MM2's `exactly.once.source.support`: `enabled` turns transactions on; `preparing` (a
    /// Connect worker's step towards it) and `disabled` leave the flow at-least-once.
    fn exactly_once(&self) -> Result<bool, ConfigError> {
        match self.get("exactly.once.source.support") {
            None => Ok(false),
            Some(p) => match p.value.trim() {
                "enabled" => Ok(true),
                "disabled" | "preparing" => Ok(false),
                other => Err(ConfigError::BadValue {
                    line: p.line,
                    key: p.key.clone(),
                    reason: format!(
                        "is `{other}`; use `enabled` (exactly-once) or `disabled` (at-least-once, the default)"
                    ),
                }),
            },
        }
    }

    fn checkpoints(&self) -> Result<Option<super::CheckpointConfig>, ConfigError> {
        if !self.parse_or("emit.checkpoints.enabled", true)? {
            return Ok(None);
        }
        let groups = self.name_filter("groups", DEFAULT_GROUPS_EXCLUDE)?;
        let seconds = |key: &str| -> Result<Duration, ConfigError> {
            let v: u64 = self.parse_or(key, 5)?;
            if v == 0 {
                let line = self.get(key).map_or(0, |p| p.line);
                return Err(ConfigError::BadValue { line, key: key.into(), reason: "must be greater than 0".into() });
            }
            Ok(Duration::from_secs(v))
        };
        Ok(Some(super::CheckpointConfig {
            interval: seconds("emit.checkpoints.interval.seconds")?,
            replication_factor: self.parse_or("checkpoints.topic.replication.factor", -1)?,
            groups,
            sync_group_offsets: if self.parse_or("sync.group.offsets.enabled", true)? {
                Some(seconds("sync.group.offsets.interval.seconds")?)
            } else {
                None
            },
        }))
    }

    fn offset_syncs(&self) -> Result<Option<super::OffsetSyncConfig>, ConfigError> {
        if !self.parse_or("emit.offset-syncs.enabled", true)? {
            return Ok(None);
        }
        let location = match self.get("offset-syncs.topic.location") {
            None => super::SyncLocation::Source,
            Some(p) => match p.value.trim() {
                "source" => super::SyncLocation::Source,
                "target" => super::SyncLocation::Target,
                other => {
                    return Err(ConfigError::BadValue {
                        line: p.line,
                        key: p.key.clone(),
                        reason: format!("is `{other}`; use `source` or `target`"),
                    })
                }
            },
        };
        Ok(Some(super::OffsetSyncConfig {
            location,
            max_lag: self.parse_or("offset.lag.max", 100)?,
            replication_factor: self.parse_or("offset-syncs.topic.replication.factor", -1)?,
        }))
    }

    /// MM2's `clusterProps`: `<alias>.<role>.<key>`, then `<alias>.<common key>`, then top-level
    /// `<common key>`; the first one found wins.
    fn client(&self, alias: &str, role: ClientRole, warnings: &mut BTreeMap<String, String>) -> ClientSettings {
        let mut out = ClientSettings::default();
        let role_prefix = format!("{}.", role.prefix());
        let cluster_keys = self.scopes.cluster.iter().filter(|((a, _), _)| a == alias);
        for ((_, key), p) in cluster_keys.clone() {
            if let Some(k) = key.strip_prefix(&role_prefix) {
                out.put_if_absent(Setting { key: k.into(), value: p.value.clone(), line: p.line });
            }
        }
        for ((_, key), p) in cluster_keys {
            if is_common_client_key(key) {
                out.put_if_absent(Setting { key: key.clone(), value: p.value.clone(), line: p.line });
            }
        }
        for (key, p) in &self.scopes.top {
            if is_common_client_key(key) {
                out.put_if_absent(Setting { key: key.clone(), value: p.value.clone(), line: p.line });
            }
        }
        let (_, dropped) = out.to_librdkafka();
        for w in dropped {
            warnings.entry(w.clone()).or_insert(w);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use super::*;

    const SEED: &str = "clusters = us-east, us-west
us-east.bootstrap.servers = 127.0.0.1:19092
us-west.bootstrap.servers = 127.0.0.1:29092
us-east->us-west.enabled = true
us-west->us-east.enabled = false
us-east->us-west.topics = orders
us-east->us-west.groups = orders-cg.*
emit.checkpoints.enabled = true
sync.group.offsets.enabled = true
sync.topic.acls.enabled = false
refresh.groups.interval.seconds = 10
";

    #[test]
    fn seed_config_gives_one_flow_and_warns_once_per_unsupported_key() {
        let cfg = Config::parse(SEED).unwrap();
        assert_eq!(cfg.flows.len(), 1);
        let f = &cfg.flows[0];
        assert_eq!(f.name(), "us-east->us-west");
        assert!(f.topics.matches("orders") && !f.topics.matches("orders-v2"));
        assert_eq!(f.replication_factor, -1);
        assert_eq!(f.consumer.get("bootstrap.servers").map(|s| s.value.as_str()), Some("127.0.0.1:19092"));
        assert_eq!(cfg.warnings.len(), 1, "{:?}", cfg.warnings);
        assert!(cfg.warnings[0].contains("`refresh.groups.interval.seconds`") && cfg.warnings[0].contains("line 11"));
        assert_eq!(f.acl_sync, None, "line 10 turns ACL sync off");
        let checkpoints = f.checkpoints.as_ref().expect("on by default");
        assert!(checkpoints.groups.matches("orders-cg-1") && !checkpoints.groups.matches("billing"));
        assert_eq!(checkpoints.sync_group_offsets, Some(Duration::from_secs(5)));
        let defaults =
            Config::parse("clusters = a, b\na.bootstrap.servers = h\nb.bootstrap.servers = h\na->b.enabled = true\n")
                .unwrap();
        let groups = &defaults.flows[0].checkpoints.as_ref().expect("on by default").groups;
        assert!(groups.matches("orders-cg"));
        for excluded in ["console-consumer-4711", "connect-mirror", "__strait"] {
            assert!(!groups.matches(excluded), "{excluded} is excluded by MM2's default");
        }
    }

    #[test]
    fn default_excludes_hide_internal_topics() {
        let f = TopicFilter::new(".*", DEFAULT_TOPICS_EXCLUDE).unwrap();
        for t in ["__consumer_offsets", "mm2-offsets.a.internal", "x-internal", "t.replica"] {
            assert!(!f.matches(t), "{t}");
        }
        assert!(f.matches("orders") && f.matches("heartbeats"));
    }

    #[test]
    fn flow_key_overrides_top_level_and_client_precedence_follows_mm2() {
        let text = "clusters = a, b
a.bootstrap.servers = h:1
b.bootstrap.servers = h:2
a->b.enabled = true
replication.factor = 3
a->b.replication.factor = 1
security.protocol = SASL_PLAINTEXT
a.security.protocol = PLAINTEXT
a.consumer.security.protocol = SSL
b.producer.linger.ms = 20
";
        let cfg = Config::parse(text).unwrap();
        let f = &cfg.flows[0];
        assert_eq!(f.replication_factor, 1);
        assert_eq!(f.consumer.get("security.protocol").unwrap().value, "SSL");
        assert_eq!(f.source_admin.get("security.protocol").unwrap().value, "PLAINTEXT");
        assert_eq!(f.producer.get("security.protocol").unwrap().value, "SASL_PLAINTEXT");
        assert_eq!(f.producer.get("linger.ms").unwrap().value, "20");
        assert!(f.consumer.get("linger.ms").is_none());
    }

    #[test]
    fn errors_name_the_line_and_the_fix() {
        let unknown = Config::parse(
            "clusters = a, b\na.bootstrap.servers = h:1\nb.bootstrap.servers = h:2\na->c.enabled = true\n",
        )
        .unwrap_err();
        assert!(unknown.to_string().contains("line 4") && unknown.to_string().contains("`c`"), "{unknown}");
        let missing = Config::parse("clusters = a, b\na.bootstrap.servers = h:1\na->b.enabled = true\n").unwrap_err();
        assert!(
            missing.to_string().contains("b.bootstrap.servers") && missing.to_string().contains("line 1"),
            "{missing}"
        );
        let stray = Config::parse("clusters = a\na.bootstrap.servers = h:1\nz.bootstrap.servers = h:2\n").unwrap_err();
        assert!(stray.to_string().contains("line 3"), "{stray}");
        let bad =
            Config::parse("clusters = a, b\na.bootstrap.servers = h\nb.bootstrap.servers = h\na->b.enabled = yes\n")
                .unwrap_err();
        assert!(bad.to_string().contains("line 4"), "{bad}");
        let regex = Config::parse("clusters = a, b\na.bootstrap.servers = h\nb.bootstrap.servers = h\na->b.enabled = true\na->b.topics = (orders\n").unwrap_err();
        assert!(regex.to_string().contains("line 5"), "{regex}");
        let none = Config::parse("clusters = a, b\na.bootstrap.servers = h\nb.bootstrap.servers = h\n").unwrap_err();
        assert!(none.to_string().contains("a->b.enabled = true"), "{none}");
    }

    #[test]
    fn exactly_once_is_mm2s_key_with_a_per_flow_override_and_commits_at_the_flush_interval() {
        let base = "clusters = a, b\na.bootstrap.servers = h\nb.bootstrap.servers = h\na->b.enabled = true\nb->a.enabled = true\noffset.flush.interval.ms = 700\n";
        let cfg = Config::parse(&format!(
            "{base}exactly.once.source.support = enabled\nb->a.exactly.once.source.support = disabled\n"
        ))
        .unwrap();
        let (ab, ba) = (&cfg.flows[0], &cfg.flows[1]);
        assert!(ab.exactly_once && !ba.exactly_once, "the flow key overrides the top-level one");
        assert_eq!(ab.transaction_interval, Duration::from_millis(700), "Connect's default: the flush interval");
        let cfg = Config::parse(&format!("{base}a->b.transaction.boundary.interval.ms = 250\n")).unwrap();
        assert!(!cfg.flows[0].exactly_once, "at-least-once by default");
        assert_eq!(cfg.flows[0].transaction_interval, Duration::from_millis(250));
        let bad = Config::parse(&format!("{base}exactly.once.source.support = yes\n")).unwrap_err();
        assert!(bad.to_string().contains("line 7") && bad.to_string().contains("`enabled`"), "{bad}");
        let long = Config::parse(&format!(
            "{base}exactly.once.source.support = enabled\ntransaction.boundary.interval.ms = 600000\n"
        ))
        .unwrap_err();
        assert!(long.to_string().contains("line 8") && long.to_string().contains("300000"), "{long}");
    }
}
