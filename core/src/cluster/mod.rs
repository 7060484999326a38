//! Kafka clients for one cluster: built from the resolved settings, checked for reachability,
//! and their errors turned into one line that names the cluster and the fix.

mod acls;
mod admin;
mod ffi;
mod group_offsets;
mod shared;
mod topic_configs;

use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, FromClientConfigAndContext, RDKafkaLogLevel};
use rdkafka::error::KafkaError;

pub use acls::{create_topic_acls, describe_topic_acls, AclOperation, TopicAcl};
pub use admin::{AdminError, ClusterAdmin, Ensured, TopicSpec};
pub use group_offsets::{list_group_offsets, GroupOffset};
pub use shared::{ControlProducer, PerCluster};
pub use topic_configs::{incremental_alter_topic_configs, ConfigOp};

use crate::config::{ClientSettings, ClusterConfig};

/// How long a cluster may take to answer its first metadata request.
pub const REACH_TIMEOUT: Duration = Duration::from_secs(15);

/// A cluster could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No broker answered in time.
    #[error("cluster `{alias}` did not answer at {bootstrap} within {}s ({reason}); check `{alias}.bootstrap.servers` (line {line}) and that its brokers are up", timeout.as_secs())]
    Unreachable {
        /// The cluster alias.
        alias: String,
        /// `bootstrap.servers` as configured.
        bootstrap: String,
        /// The line of `bootstrap.servers`.
        line: usize,
        /// How long strait waited.
        timeout: Duration,
        /// What librdkafka said.
        reason: String,
    },
    /// librdkafka refused a client setting.
    #[error("cluster `{alias}`: {role} setting `{key}` (line {line}) was refused by librdkafka: {reason}; fix or remove it")]
    BadSetting {
        /// The cluster alias.
        alias: String,
        /// `consumer`, `producer` or `admin`.
        role: &'static str,
        /// The librdkafka key.
        key: String,
        /// Where it was set (0 when strait set it).
        line: usize,
        /// librdkafka's reason, without the value (it may be a secret).
        reason: String,
    },
    /// Any other client failure.
    #[error("cluster `{alias}`: {what}: {reason}")]
    Client {
        /// The cluster alias.
        alias: String,
        /// What strait was doing.
        what: String,
        /// What librdkafka said.
        reason: String,
    },
}

/// Creates an rdkafka client of type `T` for `cluster`: strait's `defaults`, then the operator's
/// settings over them, then strait's `forced` settings on top (those keep delivery guarantees).
pub fn create_client<T, C>(
    cluster: &ClusterConfig,
    settings: &ClientSettings,
    role: &'static str,
    defaults: &[(&str, &str)],
    forced: &[(&str, &str)],
    context: C,
) -> Result<T, ClusterError>
where
    T: FromClientConfigAndContext<C>,
    C: ClientContext,
{
    let (translated, _) = settings.to_librdkafka();
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &cluster.bootstrap_servers);
    config.set("client.id", format!("strait-{}-{role}", cluster.alias));
    config.set_log_level(RDKafkaLogLevel::Warning);
    for (k, v) in defaults {
        config.set(*k, *v);
    }
    for s in &translated {
        config.set(&s.key, &s.value);
    }
    for (k, v) in forced {
        config.set(*k, *v);
    }
    config.create_with_context(context).map_err(|e| match e {
        KafkaError::ClientConfig(_, reason, key, _value) => ClusterError::BadSetting {
            alias: cluster.alias.to_string(),
            role,
            line: translated.iter().find(|s| s.key == key).map_or(0, |s| s.line),
            key,
            reason,
        },
        other => ClusterError::Client { alias: cluster.alias.to_string(), what: format!("creating the {role} client"), reason: other.to_string() },
    })
}

/// Asks `client` for cluster metadata, turning silence into [`ClusterError::Unreachable`].
pub fn check_reachable<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    cluster: &ClusterConfig,
    timeout: Duration,
) -> Result<(), ClusterError> {
    client.fetch_metadata(None, timeout).map(|_| ()).map_err(|e| ClusterError::Unreachable {
        alias: cluster.alias.to_string(),
        bootstrap: cluster.bootstrap_servers.clone(),
        line: cluster.line,
        timeout,
        reason: e.to_string(),
    })
}
