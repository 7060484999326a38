//! Clients shared by every flow of the process, one per cluster and client settings: each
//! librdkafka client brings a main thread and one per broker, and a few per flow added up to
//! hundreds of threads in a process with many flows. Shared are the producers of strait's own
//! small records (heartbeats, checkpoints, offset syncs) and the group clients of the
//! checkpoint rounds, which all run on one thread.

use std::sync::{Arc, Mutex};

use rdkafka::producer::{DefaultProducerContext, ThreadedProducer};

use super::{create_client, ClusterError};
use crate::config::{ClientSettings, ClusterConfig};

/// A producer of strait's own records.
pub type ControlProducer = Arc<ThreadedProducer<DefaultProducerContext>>;

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
    /// The `T` of `cluster` with `settings`, made by `make` the first time.
    pub fn get(&self, cluster: &ClusterConfig, settings: &ClientSettings, make: impl FnOnce() -> Result<T, ClusterError>) -> Result<Arc<T>, ClusterError> {
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, _, t)) = made.iter().find(|(alias, s, _)| alias == cluster.alias.as_str() && s == settings) {
            return Ok(t.clone());
        }
        let t = Arc::new(make()?);
        made.push((cluster.alias.to_string(), settings.clone(), t.clone()));
        Ok(t)
    }
}

impl PerCluster<ThreadedProducer<DefaultProducerContext>> {
    /// The control producer of `cluster` with `settings`: `acks=all`, a 5 ms linger.
    pub fn producer(&self, cluster: &ClusterConfig, settings: &ClientSettings) -> Result<ControlProducer, ClusterError> {
        self.get(cluster, settings, || create_client(cluster, settings, "producer", &[("linger.ms", "5")], &[("acks", "all")], DefaultProducerContext))
    }
}
