//! Kafka clients for one cluster: built from the resolved settings, checked for reachability,
//! and their errors turned into one line that names the cluster and the fix.

mod acls;
mod admin;
mod diagnose;
mod ffi;
mod group_offsets;
mod link;
mod polled;
mod shared;
mod topic_configs;

use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, FromClientConfigAndContext, RDKafkaLogLevel};
use rdkafka::error::KafkaError;

pub use acls::{create_topic_acls, describe_topic_acls, AclOperation, TopicAcl};
pub use admin::{AdminConnection, AdminError, ClusterAdmin, Ensured, TopicSpec};
pub use diagnose::{cause_of, explain, Cause};
pub use group_offsets::{list_group_offsets, list_offsets_of_groups, GroupOffset, GROUPS_IN_FLIGHT};
pub use link::{brokers_in, BrokerSample, Link, LinkWatch, Silence, WatchedConsumer, SILENCE, WATCHED};
pub use polled::{poll_producer, PolledProducer};
pub use shared::{ControlProducer, PerCluster};
pub use topic_configs::{incremental_alter_topic_configs, ConfigOp};

use crate::config::{ClientSettings, ClusterConfig};

/// How long finding out why a cluster did not answer may take.
const DIAGNOSIS_TIMEOUT: Duration = Duration::from_secs(5);

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
    /// The cluster answered but refused strait (a login, a certificate).
    #[error("cluster `{alias}` at {bootstrap} refused strait: {cause}")]
    Refused {
        /// The cluster alias.
        alias: String,
        /// `bootstrap.servers` as configured.
        bootstrap: String,
        /// What went wrong and what to check (never a secret).
        cause: String,
    },
    /// librdkafka refused a client setting.
    #[error(
        "cluster `{alias}`: {role} setting `{key}` (line {line}) was refused by librdkafka: {reason}; fix or remove it"
    )]
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

/// Settings of every consumer strait assigns partitions to and never joins a group with (the
/// data path's fetcher, position readers, lag probes); the operator cannot change them.
/// librdkafka requires a `group.id` even for assigned partitions; strait never joins or commits
/// it, positions live in the position topic. Read committed, so aborted transactions never show.
pub const ASSIGN_ONLY_CONSUMER: &[(&str, &str)] = &[
    ("group.id", "strait"),
    ("enable.auto.commit", "false"),
    ("enable.auto.offset.store", "false"),
    ("auto.offset.reset", "earliest"),
    ("enable.partition.eof", "false"),
    ("isolation.level", "read_committed"),
];

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
    let translated = librdkafka_settings(cluster, settings, role)?;
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &cluster.bootstrap_servers);
    config.set("client.id", format!("strait-{}-{role}", cluster.alias));
    config.set_log_level(RDKafkaLogLevel::Warning);
    // KIP-714 client telemetry: librdkafka gives every broker of every client six histograms for
    // it whether or not the cluster subscribes to client metrics, 88 of the 141 MiB a process of
    // 20 flows held (heaptrack). An operator who collects them sets it back per client.
    config.set("enable.metrics.push", "false");
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
            reason: format!("{reason}{}", missing_feature(&reason)),
        },
        other => {
            let reason = other.to_string();
            ClusterError::Client {
                alias: cluster.alias.to_string(),
                what: format!("creating the {role} client"),
                reason: format!("{reason}{}", missing_feature(&reason)),
            }
        }
    })
}

/// What to build when librdkafka refuses a setting because a Cargo feature left it out.
fn missing_feature(reason: &str) -> &'static str {
    if reason.contains("GSSAPI") {
        "; this strait was built without Kerberos: build it with `cargo build --release --features gssapi` (needs `apt-get install libsasl2-dev`)"
    } else if reason.contains("libcurl") {
        "; this strait was built without OIDC: build it with the default features (`oidc`)"
    } else {
        ""
    }
}

/// The operator's settings in librdkafka's words, key and trust stores included.
pub(crate) fn librdkafka_settings(
    cluster: &ClusterConfig,
    settings: &ClientSettings,
    role: &str,
) -> Result<Vec<crate::config::Setting>, ClusterError> {
    let (mut translated, _) = settings.to_librdkafka();
    translated.extend(crate::config::store_settings(settings).map_err(|e| ClusterError::Client {
        alias: cluster.alias.to_string(),
        what: format!("reading the {role} client's key and trust stores"),
        reason: e.to_string(),
    })?);
    Ok(translated)
}

/// Asks `admin`'s cluster for metadata, turning silence into [`ClusterError::Unreachable`], or
/// into [`ClusterError::Refused`] when librdkafka said why (a refused login or certificate).
pub fn check_reachable(admin: &ClusterAdmin, cluster: &ClusterConfig, timeout: Duration) -> Result<(), ClusterError> {
    let Err(e) = admin.client().fetch_metadata(None, timeout) else { return Ok(()) };
    if let Some(cause) = admin.why_refused(DIAGNOSIS_TIMEOUT) {
        return Err(ClusterError::Refused {
            alias: cluster.alias.to_string(),
            bootstrap: cluster.bootstrap_servers.clone(),
            cause,
        });
    }
    Err(ClusterError::Unreachable {
        alias: cluster.alias.to_string(),
        bootstrap: cluster.bootstrap_servers.clone(),
        line: cluster.line,
        timeout,
        reason: e.to_string(),
    })
}
