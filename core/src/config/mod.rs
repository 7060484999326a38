//! `mm2.properties` → a typed [`Config`]: the clusters, the enabled flows, and each flow's
//! client settings, resolved with MirrorMaker 2's precedence.
//!
//! strait reads an operator's existing MM2 file unchanged. Keys it does not act on yet are
//! collected in [`Config::warnings`] (one per key) instead of being silently dropped.

mod client;
#[cfg(test)]
mod documented;
mod flow;
pub mod properties;
mod schemas;
mod stores;
mod sync;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use client::{ClientRole, ClientSettings, Setting};
pub use flow::{PolicyKind, TopicFilter};
pub use schemas::{IdMode, RegistryAccess, SchemaSync};
pub use stores::{store_kind, store_settings, StoreError, StoreKind};
pub use sync::{TopicConfigSync, DEFAULT_CONFIG_PROPERTIES_EXCLUDE};

/// The name an operator gives a cluster in `clusters = ...`, e.g. `us-east`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterAlias(String);

impl ClusterAlias {
    /// Wraps an alias as written in `clusters`.
    pub fn new(alias: impl Into<String>) -> Self {
        Self(alias.into())
    }
    /// The alias as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ClusterAlias {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Everything `strait run` needs, read from one `mm2.properties`.
#[derive(Debug, Clone)]
pub struct Config {
    /// Every cluster named in `clusters`, in the order written.
    pub clusters: Vec<ClusterConfig>,
    /// Every flow with `A->B.enabled = true`.
    pub flows: Vec<FlowConfig>,
    /// Where the Prometheus endpoint listens (`strait.metrics.listen`, default `127.0.0.1:9464`).
    pub metrics_listen: SocketAddr,
    /// Threads that run the stages of every flow (`strait.stage.threads`, default 4); see
    /// [`crate::pipeline`] for how flows map to them.
    pub stage_threads: usize,
    /// How long SIGTERM/SIGINT may take (`strait.shutdown.timeout.ms`, default 30 s): flows store
    /// the positions of what the target acknowledged within it, and the process exits at its end
    /// whatever the clusters do.
    pub shutdown_timeout: Duration,
    /// `strait.group.instance.id`: this process's static membership in every flow's group
    /// (unique per process, e.g. the pod name); a restart under the same id gets its tasks back
    /// without a rebalance. `None`: dynamic membership.
    pub group_instance_id: Option<String>,
    /// One line per key that strait read but does not act on, naming the key and its line.
    pub warnings: Vec<String>,
}

/// One cluster: its alias and where to reach it.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The alias from `clusters`.
    pub alias: ClusterAlias,
    /// `<alias>.bootstrap.servers`.
    pub bootstrap_servers: String,
    /// The line of `<alias>.bootstrap.servers`, for error messages.
    pub line: usize,
}

/// One direction of replication, `source->target`, with every setting resolved.
#[derive(Debug, Clone)]
pub struct FlowConfig {
    /// Where records are read.
    pub source: ClusterAlias,
    /// Where records are written.
    pub target: ClusterAlias,
    /// `topics` / `topics.exclude`, whole-name regexes.
    pub topics: TopicFilter,
    /// Which built-in replication policy names remote topics.
    pub policy: PolicyKind,
    /// `replication.policy.wasm`: a user's policy component, and the line that names it.
    pub policy_wasm: Option<PathBuf>,
    /// Every `replication.policy.*` key of the flow (flow-level over top-level), handed to the
    /// policy component's `init`.
    pub policy_properties: Vec<(String, String)>,
    /// `strait.policy.clock`: whether policy components may read real clocks (default false).
    pub policy_clock: bool,
    /// `replication.policy.separator` (default `.`).
    pub separator: String,
    /// `replication.factor` for remote topics; -1 takes the target broker's default.
    pub replication_factor: i32,
    /// `refresh.topics.enabled` (default true).
    pub refresh_topics: bool,
    /// `refresh.topics.interval.seconds`; strait's default is 5 s (MM2's is 600 s).
    pub refresh_interval: Duration,
    /// `offset.flush.interval.ms`: how often acknowledged positions are stored (default 1 s).
    pub offset_flush_interval: Duration,
    /// `offset.storage.replication.factor` of strait's position topic (default -1).
    pub offset_storage_replication_factor: i32,
    /// `offset.storage.topic` (Kafka Connect's key): the position topic on the target, where
    /// the flow stores where each source partition resumes (default
    /// `strait-offsets.<source>.internal`). It names the flow's group too: processes that
    /// store positions in one topic are one replicator, whatever else their configs say.
    pub positions_topic: String,
    /// The position topic of the reverse flow (`target->source`), on the source: checkpoints
    /// of an active-active pair read it to translate offsets back.
    pub back_positions_topic: String,
    /// Records per batch between stages (`strait.batch.max.records`, default 2000).
    pub batch_max_records: usize,
    /// Bytes per batch between stages (`strait.batch.max.bytes`, default 1 MiB).
    pub batch_max_bytes: usize,
    /// Batches each stage channel holds (`strait.channel.capacity`, default 2).
    pub channel_capacity: usize,
    /// `provenance.enabled`: whether records carry the `strait.provenance` header and a flow
    /// refuses records that already passed through its target. `None` (`auto`, the default)
    /// turns it on when the naming policy keeps topic names, where names cannot tell a cycle.
    pub provenance: Option<bool>,
    /// `conflicts.dead.letter.topic`: where records the conflict hook refuses go on the target,
    /// instead of being dropped.
    pub dead_letter_topic: Option<String>,
    /// Topic config sync (`sync.topic.configs.enabled`, default true): which keys, how often.
    /// Remote topics are created with the source's configs even when the periodic sync is off.
    pub topic_configs: TopicConfigSync,
    /// `sync.topic.acls.enabled` (default true) and `sync.topic.acls.interval.seconds`.
    pub acl_sync: Option<Duration>,
    /// Offset syncs (`emit.offset-syncs.enabled`, default true): where and how often.
    pub offset_syncs: Option<OffsetSyncConfig>,
    /// Checkpoints and group offset sync (`emit.checkpoints.enabled`, default true).
    pub checkpoints: Option<CheckpointConfig>,
    /// `emit.heartbeats.enabled` (default true) and `emit.heartbeats.interval.seconds` (default 1).
    pub heartbeats: Option<Duration>,
    /// `heartbeats.topic.replication.factor` (default -1, the broker default).
    pub heartbeats_replication_factor: i32,
    /// `tasks.max` (MM2's key): how many tasks the flow's work is split into among the processes
    /// running it; task `t` replicates source partitions `p` with `p % tasks == t`. strait's
    /// default is 12 (MM2's is 1).
    pub tasks: u32,
    /// `strait.group.session.timeout.ms`: how long the group waits for a silent process before
    /// moving its tasks (default 10 s; the broker's minimum is 6 s by default).
    pub group_session_timeout: Duration,
    /// `exactly.once.source.support` (MM2's key; `enabled`, or `disabled`/`preparing`, the
    /// default): the flow writes its records, positions and offset runs in one transaction per
    /// task on the target, so a `read_committed` consumer there sees every record once.
    pub exactly_once: bool,
    /// `transaction.boundary.interval.ms` (Kafka Connect's key): how often an exactly-once flow
    /// commits; unset, `offset.flush.interval.ms`, as in Connect.
    pub transaction_interval: Duration,
    /// Schema registry sync (`<alias>.schema.registry.url` on both sides, `schema.*`).
    pub schemas: Option<SchemaSync>,
    /// Settings for the consumer on the source cluster.
    pub consumer: ClientSettings,
    /// Settings for the producer on the target cluster.
    pub producer: ClientSettings,
    /// Settings for a producer on the source cluster (offset syncs kept there).
    pub source_producer: ClientSettings,
    /// Settings for the admin client on the source cluster.
    pub source_admin: ClientSettings,
    /// Settings for the admin client on the target cluster.
    pub target_admin: ClientSettings,
}

/// Which cluster holds a flow's offset-syncs topic (`offset-syncs.topic.location`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncLocation {
    /// The source cluster (MM2's default), topic named after the target alias.
    Source,
    /// The target cluster, topic named after the source alias.
    Target,
}

/// MM2's checkpoint settings of a flow.
#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    /// `emit.checkpoints.interval.seconds`; strait's default is 5 s (MM2's is 60 s).
    pub interval: Duration,
    /// `checkpoints.topic.replication.factor` (default -1, the broker default).
    pub replication_factor: i32,
    /// `groups` / `groups.exclude`, whole-name regexes with MM2's defaults.
    pub groups: TopicFilter,
    /// `sync.group.offsets.enabled` (strait's default is true, MM2's false) and
    /// `sync.group.offsets.interval.seconds` (strait's default 5 s, MM2's 60 s).
    pub sync_group_offsets: Option<Duration>,
}

/// MM2's offset-sync settings of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetSyncConfig {
    /// `offset-syncs.topic.location`.
    pub location: SyncLocation,
    /// `offset.lag.max` (default 100).
    pub max_lag: i64,
    /// `offset-syncs.topic.replication.factor` (default -1, the broker default).
    pub replication_factor: i32,
}

impl FlowConfig {
    /// `source->target`, the name MM2 uses for a flow and the `flow` label on every metric.
    pub fn name(&self) -> String {
        format!("{}->{}", self.source, self.target)
    }

    /// Everything that decides how this flow runs in `config` (its settings and its two
    /// clusters), as one value: two configs give the flow the same fingerprint exactly when a
    /// reload can leave it running. Line numbers are left out, so adding a line elsewhere
    /// changes nothing; secret values are in (hashed), so a new password restarts the flow.
    pub fn fingerprint(&self, config: &Config) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let mut plain = self.clone();
        for settings in [
            &mut plain.consumer,
            &mut plain.producer,
            &mut plain.source_producer,
            &mut plain.source_admin,
            &mut plain.target_admin,
        ] {
            for s in std::mem::take(settings).iter() {
                (&s.key, &s.value).hash(&mut h);
            }
            "|".hash(&mut h);
        }
        format!("{plain:?}").hash(&mut h);
        for alias in [&self.source, &self.target] {
            config.cluster(alias).map(|c| (&c.alias, &c.bootstrap_servers)).hash(&mut h);
        }
        h.finish()
    }
}

/// The position topic of flows from `source_alias` unless `offset.storage.topic` names another.
pub fn default_positions_topic(source_alias: &str) -> String {
    format!("strait-offsets.{source_alias}.internal")
}

/// Why a config could not be used. Every variant names the line or key to fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Io {
        /// The path given.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A line is not `key = value`.
    #[error("line {line}: {reason}")]
    Malformed {
        /// 1-based line.
        line: usize,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// A key names a cluster alias that `clusters` does not list.
    #[error("line {line}: `{key}` names cluster `{alias}`, which is not in `clusters` ({known}); add it to `clusters` or fix the alias")]
    UnknownAlias {
        /// 1-based line.
        line: usize,
        /// The key as written.
        key: String,
        /// The alias that is not known.
        alias: String,
        /// The aliases `clusters` lists.
        known: String,
    },
    /// A cluster has no `bootstrap.servers`.
    #[error("line {line}: cluster `{alias}` is listed in `clusters` but has no `{alias}.bootstrap.servers`; add it, e.g. `{alias}.bootstrap.servers = host:9092`")]
    MissingBootstrap {
        /// The line of `clusters`.
        line: usize,
        /// The cluster alias.
        alias: String,
    },
    /// A value cannot be used for its key.
    #[error("line {line}: `{key}` {reason}")]
    BadValue {
        /// 1-based line.
        line: usize,
        /// The key as written.
        key: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// Something required is absent.
    #[error("{0}")]
    Missing(String),
}

impl Config {
    /// Reads and resolves an `mm2.properties` file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Io { path: path.to_path_buf(), source })?;
        Self::parse(&text)
    }

    /// Resolves the text of an `mm2.properties` file.
    ///
    /// ```
    /// let cfg = strait_core::config::Config::parse(
    ///     "clusters = a, b\na.bootstrap.servers = h1:9092\nb.bootstrap.servers = h2:9092\na->b.enabled = true\n",
    /// ).unwrap();
    /// assert_eq!(cfg.flows[0].name(), "a->b");
    /// ```
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        flow::resolve(properties::parse(text)?)
    }

    /// The cluster with this alias.
    pub fn cluster(&self, alias: &ClusterAlias) -> Option<&ClusterConfig> {
        self.clusters.iter().find(|c| &c.alias == alias)
    }
}
