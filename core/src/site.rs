//! Where the parts of one flow are built. Each part — the fetcher, the target lanes, discovery,
//! topic sync, heartbeats, checkpoints, offset syncs — makes itself from a [`Site`] with a
//! `for_flow` of its own, and the composition root (`flows/assemble.rs`) only lists them, as
//! Vector's topology builder does with its sources and sinks.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::cluster::{ClusterAdmin, ClusterError, ControlProducer, PerCluster, PolledProducer};
use crate::config::{ClientSettings, ClusterConfig, FlowConfig};
use crate::group::Tasks;
use crate::policy::{FlowPolicy, PolicyError, ReplicationPolicy, WasmFilters, WasmNaming};

/// A flow's settings, clusters and policy, and the clients its process shares, lent to each
/// part while the flow is assembled.
pub struct Site<'a> {
    /// The flow's settings.
    pub flow: &'a FlowConfig,
    /// `source->target`.
    pub name: String,
    /// The source cluster.
    pub source: &'a ClusterConfig,
    /// The target cluster.
    pub target: &'a ClusterConfig,
    /// The source's admin client, shared with the process's other flows.
    pub source_admin: Arc<ClusterAdmin>,
    /// The target's admin client, shared with the process's other flows.
    pub target_admin: Arc<ClusterAdmin>,
    /// The flow's tasks this process owns.
    pub tasks: &'a Tasks,
    /// The flow's policy components, loaded.
    pub policy: &'a FlowPolicy,
    /// The policy's topic, group and config filters.
    pub filters: Arc<WasmFilters>,
    /// The control producers (heartbeats, checkpoints, offset syncs) the process shares.
    pub producers: &'a PerCluster<PolledProducer>,
    /// Set when the flow stops: a part that waits on a cluster gives up.
    pub stop: Arc<AtomicBool>,
}

impl Site<'_> {
    /// A naming instance of the flow's policy, for a part that names topics on its own thread.
    pub fn naming(&self) -> Result<Box<dyn ReplicationPolicy>, PolicyError> {
        Ok(Box::new(WasmNaming::new(self.policy.naming.instantiate(self.flow)?)))
    }

    /// The shared control producer of `cluster` with `settings`.
    pub fn producer(
        &self,
        cluster: &ClusterConfig,
        settings: &ClientSettings,
    ) -> Result<ControlProducer, ClusterError> {
        self.producers.producer(cluster, settings)
    }

    /// Whether this process does the flow-wide work (heartbeats, checkpoints, config and ACL
    /// sync): it owns task 0.
    pub fn leads(&self) -> bool {
        self.tasks.leads()
    }
}
