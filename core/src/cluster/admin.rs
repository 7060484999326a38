//! Topic creation and growth on a cluster.

use std::time::Duration;

use std::collections::HashMap;

use rdkafka::admin::{
    AdminClient, AdminOptions, ConfigEntry, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::types::RDKafkaErrorCode;

use super::acls::{create_topic_acls, describe_topic_acls, TopicAcl};
use super::topic_configs::{incremental_alter_topic_configs, ConfigOp};
use rdkafka::client::DefaultClientContext;

use super::{create_client, diagnose, ClusterError};
use crate::config::{ClientSettings, ClusterConfig};

const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// A topic as strait wants it on a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    /// Topic name.
    pub name: String,
    /// Wanted partition count; an existing topic with fewer is grown, one with more is kept.
    pub partitions: i32,
    /// Replication factor at creation; -1 takes the broker default.
    pub replication_factor: i32,
    /// Topic configs at creation, e.g. `cleanup.policy = compact`.
    pub configs: Vec<(String, String)>,
}

impl TopicSpec {
    /// A single-partition compacted topic, the shape of every replicator-internal topic
    /// (positions, offset syncs, heartbeats).
    pub fn compacted_single(name: impl Into<String>, replication_factor: i32) -> Self {
        Self {
            name: name.into(),
            partitions: 1,
            replication_factor,
            configs: vec![("cleanup.policy".into(), "compact".into())],
        }
    }
}

/// What [`ClusterAdmin::ensure_topic`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    /// The topic was created.
    Created,
    /// The topic existed with fewer partitions and was grown.
    Grown {
        /// Partitions before.
        from: i32,
    },
    /// The topic existed with enough partitions.
    Unchanged,
}

/// A topic operation the cluster refused.
#[derive(Debug, thiserror::Error)]
#[error("cluster `{alias}`: cannot {what} topic `{topic}`: {reason}{hint}")]
pub struct AdminError {
    /// The cluster alias.
    pub alias: String,
    /// `create` or `grow`.
    pub what: &'static str,
    /// The topic.
    pub topic: String,
    /// What the broker said.
    pub reason: String,
    /// What the operator can do.
    pub hint: String,
}

/// An admin client plus the small runtime its futures need: one librdkafka instance, with a
/// thread per broker and a polling thread, which every alias of one cluster can share.
pub struct AdminConnection {
    client: AdminClient<DefaultClientContext>,
    runtime: tokio::runtime::Runtime,
}

impl AdminConnection {
    /// Connects an admin client to `cluster`.
    pub fn connect(cluster: &ClusterConfig, settings: &ClientSettings) -> Result<Self, ClusterError> {
        let client = create_client(cluster, settings, "admin", &[], &[], DefaultClientContext)?;
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_time().build().map_err(|e| ClusterError::Client {
                alias: cluster.alias.to_string(),
                what: "starting the admin runtime".into(),
                reason: e.to_string(),
            })?;
        Ok(Self { client, runtime })
    }
}

/// The admin operations strait uses on one cluster, through a connection that may be shared;
/// its errors name the alias it was asked for.
pub struct ClusterAdmin {
    alias: String,
    /// The cluster and settings it was made from, for [`ClusterAdmin::why_refused`].
    cluster: ClusterConfig,
    settings: ClientSettings,
    conn: std::sync::Arc<AdminConnection>,
}

impl ClusterAdmin {
    /// Connects an admin client of its own to `cluster`.
    pub fn connect(cluster: &ClusterConfig, settings: &ClientSettings) -> Result<Self, ClusterError> {
        Ok(Self::over(cluster, settings, std::sync::Arc::new(AdminConnection::connect(cluster, settings)?)))
    }

    /// Admin operations on `cluster` through `conn`, made with `settings` to the same servers.
    pub fn over(cluster: &ClusterConfig, settings: &ClientSettings, conn: std::sync::Arc<AdminConnection>) -> Self {
        Self { alias: cluster.alias.to_string(), cluster: cluster.clone(), settings: settings.clone(), conn }
    }

    /// The underlying client, for metadata requests.
    pub fn client(&self) -> &rdkafka::client::Client<DefaultClientContext> {
        self.conn.client.inner()
    }

    /// Why the cluster refuses this client's settings (a login, a certificate), if a probe
    /// with them can tell; `None` when it cannot (the cluster is simply down, say).
    pub fn why_refused(&self, wait: Duration) -> Option<String> {
        diagnose::why_refused(&self.cluster, &self.settings, wait)
    }

    /// Partition count of every topic of the cluster.
    pub fn partition_counts(&self) -> Result<std::collections::HashMap<String, i32>, ClusterError> {
        let md = self.client().fetch_metadata(None, ADMIN_TIMEOUT).map_err(|e| ClusterError::Client {
            alias: self.alias.clone(),
            what: "reading metadata".into(),
            reason: e.to_string(),
        })?;
        Ok(md
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .map(|t| (t.name().to_string(), t.partitions().len() as i32))
            .collect())
    }

    fn failed(&self, what: String, reason: impl ToString) -> ClusterError {
        ClusterError::Client { alias: self.alias.clone(), what, reason: reason.to_string() }
    }

    /// Every config of each of `topics`, or why the cluster did not describe it (deleted
    /// meanwhile, DESCRIBE_CONFIGS denied).
    pub fn topic_configs(
        &self,
        topics: &[&str],
    ) -> Result<HashMap<String, Result<Vec<ConfigEntry>, String>>, ClusterError> {
        if topics.is_empty() {
            return Ok(HashMap::new());
        }
        let opts = AdminOptions::new().request_timeout(Some(ADMIN_TIMEOUT));
        let specs: Vec<ResourceSpecifier<'_>> = topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
        let results = self
            .conn
            .runtime
            .block_on(self.conn.client.describe_configs(&specs, &opts))
            .map_err(|e| self.failed("describing topic configs".into(), e))?;
        Ok(topics
            .iter()
            .zip(results)
            .map(|(topic, r)| (topic.to_string(), r.map(|c| c.entries).map_err(|code| code.to_string())))
            .collect())
    }

    /// Changes `topic`'s configs by `ops` (IncrementalAlterConfigs): keys not named keep their values.
    pub fn alter_topic_configs(&self, topic: &str, ops: &[(String, ConfigOp)]) -> Result<(), ClusterError> {
        incremental_alter_topic_configs(self.client(), topic, ops, ADMIN_TIMEOUT).map_err(|reason| {
            let hint = if reason.contains("AUTHORIZATION") {
                format!("; grant strait's principal ALTER_CONFIGS on `{topic}`")
            } else {
                String::new()
            };
            self.failed(format!("changing the configs of topic `{topic}`"), format!("{reason}{hint}"))
        })
    }

    /// Every literal and prefixed ACL on topics.
    pub fn topic_acls(&self) -> Result<Vec<TopicAcl>, ClusterError> {
        describe_topic_acls(self.client(), ADMIN_TIMEOUT)
            .map_err(|reason| self.failed("describing topic ACLs".into(), reason))
    }

    /// Creates `acls`; those that exist already stay as they are.
    pub fn create_topic_acls(&self, acls: &[TopicAcl]) -> Result<(), ClusterError> {
        create_topic_acls(self.client(), acls, ADMIN_TIMEOUT)
            .map_err(|reason| self.failed("creating topic ACLs".into(), reason))
    }

    /// Looks the topic up, then [`ClusterAdmin::ensure_topic`].
    pub fn ensure_exists(&self, spec: &TopicSpec) -> Result<Ensured, ClusterError> {
        let existing = self.partition_counts()?.get(&spec.name).copied();
        self.ensure_topic(spec, existing).map_err(|e| ClusterError::Client {
            alias: self.alias.clone(),
            what: format!("preparing topic `{}`", spec.name),
            reason: e.to_string(),
        })
    }

    /// Makes sure `spec.name` exists with at least `spec.partitions` partitions.
    pub fn ensure_topic(&self, spec: &TopicSpec, existing: Option<i32>) -> Result<Ensured, AdminError> {
        let opts = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT)).request_timeout(Some(ADMIN_TIMEOUT));
        match existing {
            None => {
                let mut topic =
                    NewTopic::new(&spec.name, spec.partitions, TopicReplication::Fixed(spec.replication_factor));
                for (k, v) in &spec.configs {
                    topic = topic.set(k, v);
                }
                let result = self.conn.runtime.block_on(self.conn.client.create_topics([&topic], &opts));
                match self.first_result(result, "create", spec)? {
                    None => Ok(Ensured::Created),
                    // Someone else created it meanwhile: check its partition count next round.
                    Some(RDKafkaErrorCode::TopicAlreadyExists) => Ok(Ensured::Unchanged),
                    Some(code) => Err(self.error("create", spec, code)),
                }
            }
            Some(have) if have < spec.partitions => {
                let grow = NewPartitions::new(&spec.name, spec.partitions as usize);
                let result = self.conn.runtime.block_on(self.conn.client.create_partitions([&grow], &opts));
                match self.first_result(result, "grow", spec)? {
                    None => Ok(Ensured::Grown { from: have }),
                    Some(code) => Err(self.error("grow", spec, code)),
                }
            }
            Some(_) => Ok(Ensured::Unchanged),
        }
    }

    fn first_result(
        &self,
        result: rdkafka::error::KafkaResult<Vec<rdkafka::admin::TopicResult>>,
        what: &'static str,
        spec: &TopicSpec,
    ) -> Result<Option<RDKafkaErrorCode>, AdminError> {
        let results = result.map_err(|e| AdminError {
            alias: self.alias.clone(),
            what,
            topic: spec.name.clone(),
            reason: e.to_string(),
            hint: String::new(),
        })?;
        Ok(results.into_iter().next().and_then(|r| r.err()).map(|(_, code)| code))
    }

    fn error(&self, what: &'static str, spec: &TopicSpec, code: RDKafkaErrorCode) -> AdminError {
        let hint = match code {
            RDKafkaErrorCode::InvalidReplicationFactor => {
                format!(
                    "; replication factor {} is more than the brokers `{}` has: lower `replication.factor`",
                    spec.replication_factor, self.alias
                )
            }
            RDKafkaErrorCode::TopicAuthorizationFailed | RDKafkaErrorCode::ClusterAuthorizationFailed => {
                format!("; grant strait's principal CREATE and ALTER on `{}` of `{}`", spec.name, self.alias)
            }
            _ => String::new(),
        };
        AdminError { alias: self.alias.clone(), what, topic: spec.name.clone(), reason: code.to_string(), hint }
    }
}
