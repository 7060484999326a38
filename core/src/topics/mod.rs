//! Topic discovery: which source topics a flow replicates, their remote names, creating and
//! growing them on the target, and handing new partitions to the fetcher.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use rdkafka::Offset;

use crate::cluster::{AdminError, ClusterAdmin, ClusterError, Ensured, TopicSpec};
use crate::config::{FlowConfig, TopicFilter};
use crate::events::{FlowRetrying, PartitionMetrics, PartitionsAdded, TopicCreated};
use crate::offsets::store::Positions;
use crate::pipeline::{NewPartition, Periodic, Slot, Slots};
use crate::policy::{is_cycle, PolicyError, ReplicationPolicy};

/// Why a discovery round failed.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// A cluster did not answer.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A topic could not be created or grown.
    #[error(transparent)]
    Admin(#[from] AdminError),
    /// The naming policy failed.
    #[error(transparent)]
    Policy(#[from] PolicyError),
}

/// Finds source topics to replicate and prepares them on the target.
pub struct Discovery {
    flow: String,
    source_alias: String,
    target_alias: String,
    filter: TopicFilter,
    policy: Box<dyn ReplicationPolicy>,
    replication_factor: i32,
    source: ClusterAdmin,
    target: ClusterAdmin,
    slots: Slots,
    positions: Positions,
    /// Source topic → partitions already handed to the fetcher.
    assigned: HashMap<String, i32>,
    fetcher: Sender<Vec<NewPartition>>,
}

impl Discovery {
    /// Sets up discovery for `flow`; `positions` are where stored partitions resume.
    pub fn new(
        flow: &FlowConfig,
        policy: Box<dyn ReplicationPolicy>,
        source: ClusterAdmin,
        target: ClusterAdmin,
        slots: Slots,
        positions: Positions,
        fetcher: Sender<Vec<NewPartition>>,
    ) -> Self {
        Self {
            flow: flow.name(),
            source_alias: flow.source.to_string(),
            target_alias: flow.target.to_string(),
            filter: flow.topics.clone(),
            policy,
            replication_factor: flow.replication_factor,
            source,
            target,
            slots,
            positions,
            assigned: HashMap::new(),
            fetcher,
        }
    }

    /// MM2's `shouldReplicateTopic`: listed, not internal, and not already from the target.
    pub fn should_replicate(&self, topic: &str) -> Result<bool, PolicyError> {
        Ok(self.filter.matches(topic)
            && !self.policy.is_internal_topic(topic)?
            && !is_cycle(self.policy.as_ref(), topic, &self.target_alias)?)
    }

    /// One round: returns how many partitions were newly handed to the fetcher.
    pub fn discover(&mut self) -> Result<usize, DiscoveryError> {
        let source_topics = self.source.partition_counts()?;
        let mut wanted: Vec<(&String, i32)> = Vec::new();
        for (t, n) in &source_topics {
            if self.assigned.get(t).is_none_or(|have| have < n) && self.should_replicate(t)? {
                wanted.push((t, *n));
            }
        }
        if wanted.is_empty() {
            return Ok(0);
        }
        wanted.sort();
        let target_topics = self.target.partition_counts()?;
        let mut new = Vec::new();
        for (topic, partitions) in wanted {
            let remote = self.policy.format_remote_topic(&self.source_alias, topic)?;
            let spec = TopicSpec { name: remote.clone(), partitions, replication_factor: self.replication_factor, configs: Vec::new() };
            match self.target.ensure_topic(&spec, target_topics.get(&remote).copied())? {
                Ensured::Created => TopicCreated { flow: &self.flow, topic: &remote, partitions }.emit(),
                Ensured::Grown { from } => PartitionsAdded { flow: &self.flow, topic: &remote, from, to: partitions }.emit(),
                Ensured::Unchanged => {}
            }
            let first_new = self.assigned.get(topic).copied().unwrap_or(0);
            let source_topic: Arc<str> = Arc::from(topic.as_str());
            let remote_topic: Arc<str> = Arc::from(remote.as_str());
            for partition in first_new..partitions {
                let stored = self.positions.get(&(topic.clone(), partition)).copied();
                let slot = self.slots.add(Slot {
                    source_topic: source_topic.clone(),
                    partition,
                    remote_topic: remote_topic.clone(),
                    metrics: PartitionMetrics::new(&self.flow, &remote, partition),
                    resume_run: stored.and_then(|s| s.open),
                });
                let start = match stored {
                    Some(s) => Offset::Offset(s.next),
                    None => Offset::Beginning,
                };
                new.push(NewPartition { slot, topic: topic.clone(), partition, start });
            }
            self.assigned.insert(topic.clone(), partitions);
        }
        let count = new.len();
        // The fetcher only goes away when the flow stops, and then nothing is left to assign.
        let _ = self.fetcher.send(new);
        Ok(count)
    }

    /// Discovery as periodic work, a round every `interval`.
    pub fn ticker(self, interval: Duration) -> DiscoveryTicker {
        DiscoveryTicker { next: Instant::now() + interval, interval, discovery: self }
    }
}

/// A flow's topic discovery as periodic work.
pub struct DiscoveryTicker {
    discovery: Discovery,
    interval: Duration,
    next: Instant,
}

impl Periodic for DiscoveryTicker {
    fn tick(&mut self) {
        if Instant::now() < self.next {
            return;
        }
        // Failures are logged and retried next round.
        if let Err(e) = self.discovery.discover() {
            FlowRetrying { flow: &self.discovery.flow, what: &format!("topic discovery: {e}") }.emit();
        }
        self.next = Instant::now() + self.interval;
    }
}
