//! Whether the clusters still answer a flow's own clients (see [`crate::cluster::Link`]).

use std::time::Duration;

use metrics::counter;
use tracing::{info, warn};

/// Requests of one of a flow's clients have waited [`crate::cluster::SILENCE`] or longer with
/// no answer from some of the cluster's brokers; emitted at every statistics round while it
/// lasts, logged and counted once.
pub struct ClusterUnanswered<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// The cluster alias.
    pub cluster: &'a str,
    /// `consumer` or `producer`.
    pub client: &'static str,
    /// The watched client, among the flow's.
    pub link: u64,
    /// (silent brokers, brokers, the longest silence).
    pub silence: Option<(usize, usize, Duration)>,
}

impl ClusterUnanswered<'_> {
    /// What `/readyz` says of it.
    pub fn what(&self) -> String {
        let (silent, of, longest) = self.silence.unwrap_or_default();
        format!(
            "cluster `{}` has not answered the flow's {} for {} s ({silent} of {of} brokers with requests waiting)",
            self.cluster,
            self.client,
            longest.as_secs()
        )
    }

    /// Logs at warn level and counts when `first` (the silence just began); tells `/readyz`
    /// every time.
    pub fn emit(&self, first: bool) {
        let what = self.what();
        if first {
            warn!(flow = self.flow, cluster = self.cluster, client = self.client, "{what}");
            counter!("strait_cluster_unanswered_total", "flow" => self.flow.to_string(), "cluster" => self.cluster.to_string())
                .increment(1);
        }
        crate::health::cluster_unanswered(self.flow, self.link, &what);
    }
}

/// A cluster that had stopped answering a flow's client answers again.
pub struct ClusterAnswered<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// The cluster alias.
    pub cluster: &'a str,
    /// `consumer` or `producer`.
    pub client: &'static str,
    /// The watched client, among the flow's.
    pub link: u64,
}

impl ClusterAnswered<'_> {
    /// Logs and tells `/readyz`.
    pub fn emit(&self) {
        info!(flow = self.flow, cluster = self.cluster, client = self.client, "cluster answers again");
        crate::health::cluster_answered(self.flow, self.link);
    }
}
