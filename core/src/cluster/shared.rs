//! Clients shared by every flow of the process, one per cluster and client settings: each
//! librdkafka client brings a main thread and one per broker, and a few per flow added up to
//! hundreds of threads in a process with many flows. Shared are the producers of strait's own
//! small records (heartbeats, checkpoints, offset syncs), the admin clients and the group
//! clients of the checkpoint rounds, which all run on one thread.

use std::sync::{Arc, Mutex};

use rdkafka::producer::DefaultProducerContext;

use super::{create_client, AdminConnection, ClusterAdmin, ClusterError, PolledProducer};
use crate::config::{ClientSettings, ClusterConfig};

/// A producer of strait's own records.
pub type ControlProducer = Arc<PolledProducer>;

/// One `T` per cluster and settings, made on first use.
pub struct PerCluster<T> {
    made: Mutex<Vec<(String, ClientSettings, Arc<T>)>>,
}

impl<T> Default for PerCluster<T> {
    fn default() -> Self {
        Self { made: Mutex::new(Vec::new()) }
    }
}

impl<T> PerCluster<T> {
    /// The `T` of `cluster` with `settings`, made by `make` the first time. Aliases of one
    /// cluster (the same bootstrap servers) share it, so a `T` names no alias: a wrapper that
    /// does (in its errors) is made per use around the shared client.
    pub fn get(
        &self,
        cluster: &ClusterConfig,
        settings: &ClientSettings,
        make: impl FnOnce() -> Result<T, ClusterError>,
    ) -> Result<Arc<T>, ClusterError> {
        let key = cluster.bootstrap_servers.as_str();
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, _, t)) = made.iter().find(|(k, s, _)| k == key && s.same_client(settings)) {
            return Ok(t.clone());
        }
        let t = Arc::new(make()?);
        made.push((key.to_string(), settings.clone(), t.clone()));
        Ok(t)
    }

    /// Drops the `T` of `cluster` with `settings` (made by [`PerCluster::get`]), so the next
    /// call makes a new one; whoever holds it keeps it.
    pub fn forget(&self, cluster: &ClusterConfig, settings: &ClientSettings) {
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        made.retain(|(k, s, _)| !(k == cluster.bootstrap_servers.as_str() && s.same_client(settings)));
    }
}

impl PerCluster<PolledProducer> {
    /// The control producer of `cluster` with `settings`: `acks=all`, a 5 ms linger. Aliases
    /// of one cluster (same bootstrap servers and settings) share it: it names no alias, and
    /// each brings a polling thread and one per broker.
    pub fn producer(
        &self,
        cluster: &ClusterConfig,
        settings: &ClientSettings,
    ) -> Result<ControlProducer, ClusterError> {
        self.get(cluster, settings, || {
            create_client(
                cluster,
                settings,
                "producer",
                &[("linger.ms", "5")],
                &[("acks", "all")],
                DefaultProducerContext,
            )
        })
    }
}

impl PerCluster<AdminConnection> {
    /// The admin client of `cluster` with `settings`. Its connection is shared by every flow
    /// that reaches the cluster under any alias (each admin client is a librdkafka instance with
    /// a thread per broker and a polling thread); its errors name `cluster`'s alias.
    pub fn admin(&self, cluster: &ClusterConfig, settings: &ClientSettings) -> Result<Arc<ClusterAdmin>, ClusterError> {
        let conn = self.get(cluster, settings, || AdminConnection::connect(cluster, settings))?;
        Ok(Arc::new(ClusterAdmin::over(cluster, settings, conn)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClusterAlias;

    #[test]
    fn one_per_cluster_until_forgotten() {
        let cluster = |alias: &str| ClusterConfig {
            alias: ClusterAlias::new(alias),
            bootstrap_servers: format!("{}:9092", alias.trim_end_matches(char::is_numeric)),
            line: 1,
        };
        let settings = ClientSettings::default();
        let made = std::sync::atomic::AtomicU32::new(0);
        let per: PerCluster<u32> = PerCluster::default();
        let get = |alias: &str| {
            per.get(&cluster(alias), &settings, || Ok(made.fetch_add(1, std::sync::atomic::Ordering::Relaxed)))
                .map(|t| *t)
                .ok()
        };
        assert_eq!((get("a"), get("a"), get("b")), (Some(0), Some(0), Some(1)), "one per cluster");
        assert_eq!(get("a2"), Some(0), "aliases of one cluster (the same bootstrap servers) share it");
        per.forget(&cluster("a2"), &settings);
        assert_eq!((get("a"), get("b")), (Some(2), Some(1)), "a forgotten one is made again; the others stay");
    }
}
