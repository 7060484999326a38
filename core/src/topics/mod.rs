//! Topic discovery: which source topics a flow replicates, their remote names, creating and
//! growing them on the target (with the source's configs), and handing new partitions to the
//! fetcher; and the rounds that keep remote topics' configs and ACLs in line with the source.

pub mod acls;
pub mod configs;
mod sync;

pub use sync::{creation_configs, Replicated, SyncError, TopicSync};

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use rdkafka::Offset;

use crate::cluster::{AdminError, ClusterAdmin, ClusterError, Ensured, TopicSpec};
use crate::config::{FlowConfig, TopicConfigSync, TopicFilter};
use crate::events::{FlowRetrying, PartitionMetrics, PartitionsAdded, TasksIdle, TopicCreated, TopicDeleted};
use crate::group::Tasks;
use crate::offsets::store::Positions;
use crate::offsets::Run;
use crate::pipeline::{AssignmentChange, NewPartition, Periodic, Slot, Slots};
use crate::policy::{is_cycle, PolicyError, ReplicationPolicy, WasmFilters};
use crate::record::{SlotId, SourceOffset, TargetOffset};
use crate::site::Site;

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
    /// The source topic's configs could not be read.
    #[error(transparent)]
    Sync(#[from] SyncError),
}

/// Why a flow does not replicate `topic`, or `None` when it does: not listed by `topics` /
/// `topics.exclude`, internal, a cycle back to `target_alias`, or refused by `filters.topic`
/// (asked last, so the policy sees only names the config lets through).
pub fn topic_verdict(
    topic: &str,
    listed: &TopicFilter,
    naming: &dyn ReplicationPolicy,
    filters: &WasmFilters,
    target_alias: &str,
) -> Result<Option<&'static str>, PolicyError> {
    Ok(if !listed.matches(topic) {
        Some("topics / topics.exclude")
    } else if naming.is_internal_topic(topic)? {
        Some("internal")
    } else if is_cycle(naming, topic, target_alias)? {
        Some("came from the target (cycle)")
    } else if !filters.topic(topic)? {
        Some("filters.topic")
    } else {
        None
    })
}

/// Finds source topics to replicate and prepares them on the target.
pub struct Discovery {
    flow: String,
    source_alias: String,
    target_alias: String,
    filter: TopicFilter,
    policy: Box<dyn ReplicationPolicy>,
    filters: Arc<WasmFilters>,
    topic_configs: TopicConfigSync,
    replicated: Replicated,
    replication_factor: i32,
    source: Arc<ClusterAdmin>,
    target: Arc<ClusterAdmin>,
    slots: Slots,
    positions: Positions,
    /// Source topic → how many of its partitions were looked at, and the slots of those handed
    /// to the fetcher (the partitions of this process's tasks).
    assigned: HashMap<String, (i32, Vec<(i32, SlotId)>)>,
    /// The tasks this process runs: only their partitions are read.
    tasks: Tasks,
    /// Topics missing from one round's metadata: gone for good if the next round agrees.
    missing: HashSet<String>,
    /// `<source>.consumer.auto.offset.reset = latest`: partitions with no stored position start
    /// at their end.
    from_latest: bool,
    fetcher: Sender<AssignmentChange>,
    /// The partition count of the widest replicated topic when last checked against `tasks.max`;
    /// `None` before the first round, so that round sets `strait_tasks_idle` even with no topic
    /// (a restarted flow's gauge would otherwise keep its last run's value).
    widest: Option<i32>,
}

/// How long reading a partition's end may take.
const WATERMARK_TIMEOUT: Duration = Duration::from_secs(10);

/// The first and next offsets of a partition.
fn watermarks(admin: &ClusterAdmin, alias: &str, topic: &str, partition: i32) -> Result<(i64, i64), ClusterError> {
    admin.client().fetch_watermarks(topic, partition, WATERMARK_TIMEOUT).map_err(|e| ClusterError::Client {
        alias: alias.to_string(),
        what: format!("reading the offsets of {topic}-{partition}"),
        reason: e.to_string(),
    })
}

impl Discovery {
    /// The flow's discovery, its first round done: the source topics the flow replicates are
    /// found, their remote topics (named by `naming`) created on the target, and the partitions
    /// of this process's tasks handed to `fetcher`, resuming at `positions` or, with no stored
    /// position, at the log's start (its end with `from_latest`).
    pub fn for_flow(
        site: &Site<'_>,
        naming: Box<dyn ReplicationPolicy>,
        slots: Slots,
        positions: Positions,
        fetcher: Sender<AssignmentChange>,
        from_latest: bool,
    ) -> Result<Self, DiscoveryError> {
        let (source, target) = (site.source_admin.clone(), site.target_admin.clone());
        let mut discovery = Self::new(site.flow, naming, source, target, slots, positions, fetcher)
            .from_latest(from_latest)
            .tasks(site.tasks.clone())
            .filters(site.filters.clone());
        discovery.discover()?;
        Ok(discovery)
    }

    /// Sets up discovery for `flow`; `positions` are where stored partitions resume.
    pub fn new(
        flow: &FlowConfig,
        policy: Box<dyn ReplicationPolicy>,
        source: Arc<ClusterAdmin>,
        target: Arc<ClusterAdmin>,
        slots: Slots,
        positions: Positions,
        fetcher: Sender<AssignmentChange>,
    ) -> Self {
        Self {
            flow: flow.name(),
            source_alias: flow.source.to_string(),
            target_alias: flow.target.to_string(),
            filter: flow.topics.clone(),
            policy,
            filters: Arc::new(WasmFilters::keep_all()),
            topic_configs: flow.topic_configs.clone(),
            replicated: Replicated::default(),
            replication_factor: flow.replication_factor,
            source,
            target,
            slots,
            positions,
            assigned: HashMap::new(),
            missing: HashSet::new(),
            tasks: Tasks::all(1),
            from_latest: false,
            fetcher,
            widest: None,
        }
    }

    /// Starts partitions with no stored position at their end instead of their beginning
    /// (`<source>.consumer.auto.offset.reset = latest`).
    pub fn from_latest(mut self, latest: bool) -> Self {
        self.from_latest = latest;
        self
    }

    /// Asks the policy's `filters.topic` and `filters.topic-config` too.
    pub fn filters(mut self, filters: Arc<WasmFilters>) -> Self {
        self.filters = filters;
        self
    }

    /// Reads only the partitions of `tasks` (those this process owns in the flow's group).
    pub fn tasks(mut self, tasks: Tasks) -> Self {
        self.tasks = tasks;
        self
    }

    /// The topics replicated so far, shared with the config and ACL rounds.
    pub fn replicated(&self) -> Replicated {
        self.replicated.clone()
    }

    /// MM2's `shouldReplicateTopic` (listed, not internal, and not already from the target),
    /// then the policy's `filters.topic`.
    pub fn should_replicate(&self, topic: &str) -> Result<bool, PolicyError> {
        Ok(topic_verdict(topic, &self.filter, self.policy.as_ref(), &self.filters, &self.target_alias)?.is_none())
    }

    /// One round: returns how many partitions were newly handed to the fetcher.
    pub fn discover(&mut self) -> Result<usize, DiscoveryError> {
        let source_topics = self.source.partition_counts()?;
        let removed = self.removed_topics(&source_topics);
        let mut wanted: Vec<(&String, i32)> = Vec::new();
        for (t, n) in &source_topics {
            if self.assigned.get(t).is_some_and(|(seen, _)| seen >= n) {
                continue;
            }
            match self.should_replicate(t) {
                Ok(true) => wanted.push((t, *n)),
                Ok(false) => {}
                // A filter that fails holds back its topic only, until a later round.
                Err(e) if e.is_filter() => {
                    FlowRetrying { flow: &self.flow, what: &format!("topic `{t}` not replicated yet: {e}") }.emit()
                }
                Err(e) => return Err(e.into()),
            }
        }
        let mut change = AssignmentChange { added: Vec::new(), removed };
        let mut failure = None;
        if !wanted.is_empty() {
            wanted.sort();
            match self.target.partition_counts() {
                Ok(target_topics) => {
                    for (topic, partitions) in wanted {
                        // One topic the clusters refuse (a config the target does not know, a
                        // partition offline, DESCRIBE_CONFIGS denied) holds back only itself, as
                        // in MM2; a broken naming policy stops the flow.
                        match self.prepare(topic, partitions, &target_topics, &mut change.added) {
                            Ok(()) => {}
                            Err(e @ DiscoveryError::Policy(_)) => {
                                failure = Some(e);
                                break;
                            }
                            Err(e) => FlowRetrying {
                                flow: &self.flow,
                                what: &format!("topic `{topic}` not replicated yet: {e}"),
                            }
                            .emit(),
                        }
                    }
                }
                Err(e) => failure = Some(e.into()),
            }
        }
        let widest = self.assigned.values().map(|(seen, _)| *seen).max().unwrap_or(0);
        // Also once the widest topic has grown to `tasks.max`, or the last topic went: the gauge
        // goes back to 0.
        if self.widest != Some(widest) {
            self.widest = Some(widest);
            TasksIdle {
                flow: &self.flow,
                tasks: self.tasks.count,
                widest,
                only_empty_tasks_owned: self.tasks.only_empty(widest),
            }
            .emit();
        }
        let count = change.added.len();
        if count > 0 || !change.removed.is_empty() {
            // The fetcher only goes away when the flow stops, and then nothing is left to assign.
            let _ = self.fetcher.send(change);
        }
        failure.map_or(Ok(count), Err)
    }

    /// Topics replicated so far that two rounds in a row did not find on the source: deleted.
    /// Their remote topics stay (as in MM2); their positions are forgotten, so a topic created
    /// again under the same name is replicated from its start.
    fn removed_topics(&mut self, source_topics: &HashMap<String, i32>) -> Vec<(SlotId, String, i32)> {
        let gone: Vec<String> = self.assigned.keys().filter(|t| !source_topics.contains_key(*t)).cloned().collect();
        let mut removed = Vec::new();
        let mut still_missing = HashSet::new();
        for topic in gone {
            if !self.missing.contains(&topic) {
                still_missing.insert(topic);
                continue;
            }
            let (_, slots) = self.assigned.remove(&topic).unwrap_or_default();
            for (partition, slot) in slots {
                self.slots.retire(slot);
                self.positions.remove(&(topic.clone(), partition));
                removed.push((slot, topic.clone(), partition));
            }
            self.replicated.remove(&topic);
            TopicDeleted { flow: &self.flow, topic: &topic }.emit();
        }
        self.missing = still_missing;
        removed
    }

    /// Creates or grows the remote topic of `topic` and adds slots for its new partitions.
    fn prepare(
        &mut self,
        topic: &str,
        partitions: i32,
        target_topics: &HashMap<String, i32>,
        new: &mut Vec<NewPartition>,
    ) -> Result<(), DiscoveryError> {
        let remote = self.policy.format_remote_topic(&self.source_alias, topic)?;
        let existing = target_topics.get(&remote).copied();
        // A remote topic is created with the source's configs, so a compacted topic is compacted
        // on the target from its first record (KAFKA-12254).
        let configs = match existing {
            None => creation_configs(&self.source, topic, &self.topic_configs, &self.filters)?,
            Some(_) => Vec::new(),
        };
        let spec = TopicSpec { name: remote.clone(), partitions, replication_factor: self.replication_factor, configs };
        let first_new = self.assigned.get(topic).map_or(0, |(seen, _)| *seen);
        // Ends are read before anything changes, so a failure here leaves the round to retry whole.
        let mut starts = Vec::new();
        for partition in (first_new..partitions).filter(|p| self.tasks.owns_partition(*p)) {
            let stored = self.positions.get(&(topic.to_string(), partition)).copied();
            let start = match stored {
                Some(s) => (Offset::Offset(s.next.get()), None, s.open),
                None => {
                    // A partition seen for the first time is anchored at once: its first offset
                    // maps to where its first record will land on the target, so a group that
                    // committed there (an empty partition, or one read from its end) translates
                    // exactly before any record is replicated.
                    let (low, end) = watermarks(&self.source, &self.source_alias, topic, partition)?;
                    let landing = match existing {
                        Some(n) if partition < n => watermarks(&self.target, &self.target_alias, &remote, partition)?.1,
                        _ => 0,
                    };
                    let (offset, first) =
                        if self.from_latest { (Offset::Offset(end), end) } else { (Offset::Beginning, low) };
                    (
                        offset,
                        Some(SourceOffset(first)),
                        Some(Run { upstream: SourceOffset(first), downstream: TargetOffset(landing), len: 0 }),
                    )
                }
            };
            starts.push((partition, start));
        }
        match self.target.ensure_topic(&spec, existing)? {
            Ensured::Created => TopicCreated { flow: &self.flow, topic: &remote, partitions }.emit(),
            Ensured::Grown { from } => {
                PartitionsAdded { flow: &self.flow, topic: &remote, from, to: partitions }.emit()
            }
            Ensured::Unchanged => {}
        }
        let source_topic: Arc<str> = Arc::from(topic);
        let remote_topic: Arc<str> = Arc::from(remote.as_str());
        let assigned = self.assigned.entry(topic.to_string()).or_default();
        assigned.0 = partitions;
        for (partition, (start, start_at, resume_run)) in starts {
            let slot = self.slots.add(Slot {
                source_topic: source_topic.clone(),
                partition,
                remote_topic: remote_topic.clone(),
                metrics: PartitionMetrics::new(&self.flow, &remote, partition),
                resume_run,
                start_at,
                retired: false,
            });
            assigned.1.push((partition, slot));
            new.push(NewPartition { slot, topic: topic.to_string(), partition, start });
        }
        self.missing.remove(topic);
        self.replicated.insert(topic, &remote);
        Ok(())
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
