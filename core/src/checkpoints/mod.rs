//! Checkpoints and group offset sync: where each consumer group of the source is, translated to
//! the target, written to `<source>.checkpoints.internal` there in MM2's layout, and committed
//! to the target's group while that group is empty.
//!
//! Translation reads the flow's exact offset mapping (see [`crate::offsets::PartitionMap`]) from
//! the position topic, so a failed-over group re-reads nothing and skips nothing. When the other
//! direction runs too, groups on the source that consume topics replicated *from* the target get
//! checkpoints mapped back to the original topic (failback).

mod groups;
mod round;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use groups::{Committed, Groups};
pub use round::settle_within;
use round::Round;

use crate::cluster::{ClusterError, ControlProducer, TopicSpec, REACH_TIMEOUT};
use crate::config::{CheckpointConfig, TopicFilter};
use crate::events::{FlowRetrying, GroupOffsetsSynced, GroupSyncSkipped};
use crate::offsets::mm2::Checkpoint;
use crate::offsets::store::{read_topic, Mappings, TopicTail};
use crate::offsets::{Settled, TargetExtent};
use crate::pipeline::{Periodic, StageError};
use crate::policy::{ReplicationPolicy, WasmFilters};
use crate::record::{SourceOffset, TargetOffset};
use crate::site::Site;

/// How long one step of a checkpoint round may wait on a cluster: catching up with a mapping
/// topic, or flushing the round's checkpoints. A round runs every few seconds, so a step that
/// takes longer reports and the next round tries again.
const ROUND_STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether a checkpoint at (`upstream`, `downstream`) replaces `last`: when something changed
/// and the translation did not go backwards, or when the group itself went back upstream.
pub fn due(last: Option<&Checkpoint>, upstream: i64, downstream: i64) -> bool {
    match last {
        None => true,
        Some(l) => {
            (upstream, downstream) != (l.upstream, l.downstream)
                && (upstream < l.upstream || downstream >= l.downstream)
        }
    }
}

/// A source partition whose group offsets the flow can translate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    /// The topic as the group on the source knows it.
    pub source_topic: String,
    /// Partition, the same on both clusters.
    pub partition: i32,
    /// The topic as named on the target (the checkpoint's topic).
    pub target_topic: String,
    /// True when the topic came *from* the target and translation runs backwards (failback).
    pub back: bool,
}

/// The offset mappings one flow translates through.
#[derive(Debug, Default)]
pub struct Translation {
    /// This flow's mapping: source topic-partition → remote topic on the target.
    pub forward: Mappings,
    /// The reverse flow's mapping (target topic → remote topic on the source), when it runs.
    pub back: Mappings,
}

impl Translation {
    /// Every partition a group on `source_alias` could be checkpointed for: the flow's own
    /// topics (`topics`; the position topic may hold other flows from the same source), and
    /// every topic the reverse flow replicated.
    pub fn watched(
        &self,
        naming: &dyn ReplicationPolicy,
        topics: &TopicFilter,
        source_alias: &str,
        target_alias: &str,
    ) -> Result<Vec<Watched>, StageError> {
        let mut out = Vec::new();
        for (topic, partition) in self.forward.partitions.keys().filter(|(t, _)| topics.matches(t)) {
            let target_topic = naming.format_remote_topic(source_alias, topic)?;
            out.push(Watched { source_topic: topic.clone(), partition: *partition, target_topic, back: false });
        }
        for (topic, partition) in self.back.partitions.keys() {
            let source_topic = naming.format_remote_topic(target_alias, topic)?;
            out.push(Watched { source_topic, partition: *partition, target_topic: topic.clone(), back: true });
        }
        out.sort_by(|a, b| (&a.source_topic, a.partition).cmp(&(&b.source_topic, b.partition)));
        Ok(out)
    }

    /// What a round may write for `group`'s committed offset on one partition. `target` is the
    /// remote partition's extent, read after the commit: a forward translation is written only
    /// once the stored mapping reflects everything the target held then
    /// ([`PartitionMap::settled`](crate::offsets::PartitionMap::settled)); without it, the
    /// round waits.
    pub fn checkpoint(
        &self,
        group: &str,
        watched: &Watched,
        committed: &Committed,
        target: Option<TargetExtent>,
    ) -> Verdict {
        let upstream = SourceOffset(committed.offset);
        let (downstream, ahead) = if watched.back {
            // The reverse flow copies this flow's target to its source: its offsets are this
            // flow's with the sides swapped.
            let Some(map) = self.back.get(&watched.target_topic, watched.partition) else { return Verdict::Skip };
            match map.settled_back(TargetOffset(upstream.get())) {
                Settled::Exact(theirs) => (Some(TargetOffset(theirs.get())), false),
                Settled::Ahead(theirs) => (Some(TargetOffset(theirs.get())), true),
                Settled::Pending => return Verdict::Wait,
                Settled::Unknown => (None, false),
            }
        } else {
            let Some(map) = self.forward.get(&watched.source_topic, watched.partition) else { return Verdict::Skip };
            let Some(target) = target else { return Verdict::Wait };
            match map.settled(upstream, target) {
                Settled::Exact(downstream) => (Some(downstream), false),
                Settled::Ahead(downstream) => (Some(downstream), true),
                Settled::Pending => return Verdict::Wait,
                Settled::Unknown => (None, false),
            }
        };
        let Some(downstream) = downstream else { return Verdict::Skip };
        let checkpoint = Checkpoint {
            group: group.to_string(),
            topic: watched.target_topic.clone(),
            partition: watched.partition,
            upstream: upstream.get(),
            downstream: downstream.get(),
            metadata: committed.metadata.clone(),
        };
        if ahead {
            Verdict::Ahead(checkpoint)
        } else {
            Verdict::Write(checkpoint)
        }
    }

    /// Where a group whose next offset on this flow's source is `upstream` resumes on the
    /// target, if the mapping covers it.
    pub fn resume_at(&self, watched: &Watched, upstream: SourceOffset) -> Option<TargetOffset> {
        if watched.back {
            // The reverse flow copies this flow's target to its source: its offsets are this
            // flow's with the sides swapped.
            let map = self.back.get(&watched.target_topic, watched.partition)?;
            map.translate_back(TargetOffset(upstream.get())).map(|theirs| TargetOffset(theirs.get()))
        } else {
            self.forward.get(&watched.source_topic, watched.partition)?.translate(upstream)
        }
    }
}

/// What a checkpoint round does with one group's committed offset on one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Write this checkpoint (if it moved).
    Write(Checkpoint),
    /// The group is ahead of replication: write this checkpoint if the flow does not catch up
    /// with it while the round waits.
    Ahead(Checkpoint),
    /// The stored positions do not cover what the target holds yet: read them again.
    Wait,
    /// The mapping cannot translate it (older than every run, or a partition it does not know).
    Skip,
}

/// A checkpoint's identity: (group, topic on the target, partition).
pub type CheckpointKey = (String, String, i32);

/// The checkpoints group offset sync may commit, by group: the latest of those the flow's own
/// checkpoint round covers (`owned`). The checkpoints topic is shared by every replicator of the
/// same source and target, and a flow reads it all back at start, so `last` also holds other
/// replicators' groups and topics: committing those would move groups this flow was never
/// asked to fail over.
pub fn owned_checkpoints(
    last: &HashMap<CheckpointKey, Checkpoint>,
    owned: &HashSet<CheckpointKey>,
) -> BTreeMap<String, Vec<Checkpoint>> {
    let mut by_group: BTreeMap<String, Vec<Checkpoint>> = BTreeMap::new();
    for (key, checkpoint) in last.iter().filter(|(key, _)| owned.contains(*key)) {
        by_group.entry(key.0.clone()).or_default().push(checkpoint.clone());
    }
    for checkpoints in by_group.values_mut() {
        checkpoints.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    }
    by_group
}

/// Which checkpoints to commit for an empty group on the target: those ahead of its commits.
pub fn ahead_of(checkpoints: &[Checkpoint], committed: &[Committed]) -> Vec<Committed> {
    checkpoints
        .iter()
        .filter(|c| {
            !committed.iter().any(|t| t.topic == c.topic && t.partition == c.partition && t.offset >= c.downstream)
        })
        .map(|c| Committed {
            topic: c.topic.clone(),
            partition: c.partition,
            offset: c.downstream,
            metadata: c.metadata.clone(),
        })
        .collect()
}

/// Everything the checkpoint thread of one flow needs.
pub struct CheckpointTask {
    /// `source->target`.
    pub flow: String,
    /// Source alias.
    pub source_alias: String,
    /// Target alias.
    pub target_alias: String,
    /// Intervals and group filter.
    pub config: CheckpointConfig,
    /// The flow's `topics` / `topics.exclude`.
    pub topics: TopicFilter,
    /// The flow's naming policy.
    pub naming: Box<dyn ReplicationPolicy>,
    /// The flow's policy filters (`filters.group`).
    pub filters: Arc<WasmFilters>,
    /// Groups on the source.
    pub source_groups: Arc<Groups>,
    /// Groups on the target.
    pub target_groups: Arc<Groups>,
    /// Reads this flow's position topic on the target.
    pub forward_tail: TopicTail,
    /// Reads the reverse flow's position topic on the source, once that flow made it.
    pub back_tail: TopicTail,
    /// A producer on the target.
    pub producer: ControlProducer,
    /// `<source>.checkpoints.internal`.
    pub topic: String,
    /// The latest checkpoint per (group, target topic, partition), read back at start so
    /// checkpoints stay monotonic across restarts.
    pub last: HashMap<CheckpointKey, Checkpoint>,
    /// The (group, target topic, partition)s the latest checkpoint round covered: groups that
    /// pass the flow's filters, on partitions it translates. Group offset sync commits only
    /// these.
    pub owned: HashSet<CheckpointKey>,
    /// How long a round waits for the flow to store the positions the target already holds
    /// (see [`settle_within`]).
    pub settle_within: Duration,
    /// Exactly-once: the flow commits its positions with its records.
    pub stored_with_records: bool,
}

/// The clients a flow's checkpoint rounds read groups and positions through, shared with the
/// process's other flows.
pub struct CheckpointClients {
    /// Groups on the source.
    pub source_groups: Arc<Groups>,
    /// Groups on the target.
    pub target_groups: Arc<Groups>,
    /// Reads this flow's position topic on the target.
    pub forward_tail: TopicTail,
    /// Reads the reverse flow's position topic on the source.
    pub back_tail: TopicTail,
}

impl CheckpointTask {
    /// The flow's checkpoints and group offset sync, when either is on and this process owns
    /// task 0: the checkpoints topic is created on the target and read back, so checkpoints
    /// stay monotonic across restarts, and then the shared `clients` are taken.
    pub fn for_flow(
        site: &Site<'_>,
        clients: impl FnOnce() -> Result<CheckpointClients, ClusterError>,
    ) -> Result<Option<Self>, StageError> {
        let Some(config) = site.flow.checkpoints.as_ref().filter(|_| site.leads()) else { return Ok(None) };
        let naming = site.naming()?;
        let topic = naming.checkpoints_topic(site.source.alias.as_str())?;
        site.target_admin.ensure_exists(&TopicSpec::compacted_single(topic.clone(), config.replication_factor))?;
        let mut last = HashMap::new();
        read_topic(site.target, &site.flow.target_admin, &topic, REACH_TIMEOUT * 4, |k, v| {
            if let Some(c) = v.and_then(|v| Checkpoint::decode(k, v)) {
                last.insert((c.group.clone(), c.topic.clone(), c.partition), c);
            }
        })?;
        let producer = site.producer(site.target, &site.flow.producer)?;
        let CheckpointClients { source_groups, target_groups, forward_tail, back_tail } = clients()?;
        Ok(Some(Self {
            flow: site.name.clone(),
            source_alias: site.source.alias.to_string(),
            target_alias: site.target.alias.to_string(),
            config: config.clone(),
            topics: site.flow.topics.clone(),
            filters: site.filters.clone(),
            naming,
            source_groups,
            target_groups,
            forward_tail,
            back_tail,
            producer,
            topic,
            last,
            owned: HashSet::new(),
            stored_with_records: site.flow.exactly_once,
            settle_within: settle_within(if site.flow.exactly_once {
                site.flow.transaction_interval
            } else {
                site.flow.offset_flush_interval
            }),
        }))
    }

    /// Checkpoints and group offset sync as periodic work; failures are logged and retried
    /// next round.
    pub fn ticker(self) -> CheckpointTicker {
        let next_sync = self.config.sync_group_offsets.map(|i| Instant::now() + i);
        CheckpointTicker {
            task: self,
            translation: Translation::default(),
            back_found: false,
            round: None,
            next_checkpoint: Instant::now(),
            next_sync,
        }
    }

    /// The source's groups this flow checkpoints: `groups`/`groups.exclude` and the policy's
    /// group filter. A filter that fails holds back its group only, until a later round: it goes
    /// to `held`.
    fn groups(&self, held: &mut Vec<String>) -> Result<Vec<String>, ClusterError> {
        let mut groups = Vec::new();
        for group in self.source_groups.list()? {
            if group == "strait" || !self.config.groups.matches(&group) {
                continue;
            }
            match self.filters.group(&group) {
                Ok(true) => groups.push(group),
                Ok(false) => {}
                Err(e) => self.hold(group, e, held),
            }
        }
        Ok(groups)
    }

    /// Holds `group` back from this round alone, for `why`, until a later round.
    fn hold(&self, group: String, why: impl std::fmt::Display, held: &mut Vec<String>) {
        FlowRetrying { flow: &self.flow, what: &format!("group `{group}` not checkpointed this round: {why}") }.emit();
        held.push(group);
    }

    /// Commits the latest checkpoints of every group of this flow that is empty on the target,
    /// where they are ahead of what it committed there.
    fn sync_round(&mut self) {
        for (group, checkpoints) in owned_checkpoints(&self.last, &self.owned) {
            match sync_group(&self.target_groups, &group, &checkpoints) {
                Ok(SyncOutcome::Active(members)) => {
                    GroupSyncSkipped { flow: &self.flow, group: &group, members }.emit()
                }
                Ok(SyncOutcome::Committed(n)) if n > 0 => {
                    GroupOffsetsSynced { flow: &self.flow, group: &group, partitions: n }.emit()
                }
                Ok(SyncOutcome::Committed(_)) => {}
                Err(e) => {
                    FlowRetrying { flow: &self.flow, what: &format!("group offset sync of `{group}`: {e}") }.emit()
                }
            }
        }
    }
}

/// What [`sync_group`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncOutcome {
    /// The group has members on the target; nothing was committed.
    Active(usize),
    /// The group was empty; this many partitions moved forward.
    Committed(usize),
}

/// Commits `checkpoints` for `group` on the target where they are ahead of its commits there,
/// only while the group has no members, never moving it backwards.
pub fn sync_group(target: &Groups, group: &str, checkpoints: &[Checkpoint]) -> Result<SyncOutcome, ClusterError> {
    let members = target.members(group)?;
    if members > 0 {
        return Ok(SyncOutcome::Active(members));
    }
    let partitions: Vec<(String, i32)> = checkpoints.iter().map(|c| (c.topic.clone(), c.partition)).collect();
    let committed = target.committed(group, &partitions)?;
    let ahead = ahead_of(checkpoints, &committed);
    if !ahead.is_empty() {
        target.commit(group, &ahead)?;
    }
    Ok(SyncOutcome::Committed(ahead.len()))
}

/// A flow's checkpoints and group offset sync as periodic work.
pub struct CheckpointTicker {
    task: CheckpointTask,
    translation: Translation,
    /// Whether the reverse flow's position topic exists.
    back_found: bool,
    /// The round still waiting for the flow's positions, if one is.
    round: Option<Round>,
    next_checkpoint: Instant,
    next_sync: Option<Instant>,
}

impl Periodic for CheckpointTicker {
    fn tick(&mut self) {
        if self.round.is_none() && Instant::now() >= self.next_checkpoint {
            match self.task.start_round(&mut self.translation, &mut self.back_found) {
                Ok(round) => self.round = Some(round),
                Err(e) => {
                    FlowRetrying { flow: &self.task.flow, what: &format!("checkpoints: {e}") }.emit();
                    self.next_checkpoint = Instant::now() + self.task.config.interval;
                }
            }
        }
        if let Some(mut round) = self.round.take() {
            if self.task.settle(&mut round, &mut self.translation) {
                self.task.finish_round(round, &mut self.translation);
                self.next_checkpoint = Instant::now() + self.task.config.interval;
            } else {
                self.round = Some(round);
            }
        }
        if let (Some(at), Some(interval)) = (self.next_sync, self.task.config.sync_group_offsets) {
            if Instant::now() >= at {
                self.task.sync_round();
                self.next_sync = Some(Instant::now() + interval);
            }
        }
    }

    fn finish(&mut self) {
        let _ = self.task.producer.flush(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offsets::store::{encode_key, encode_run_key, encode_run_value, encode_value, Stored};
    use crate::offsets::Run;

    fn run(upstream: i64, downstream: i64, len: i64) -> Run {
        Run { upstream: SourceOffset(upstream), downstream: TargetOffset(downstream), len }
    }

    fn cp(upstream: i64, downstream: i64) -> Checkpoint {
        Checkpoint {
            group: "g".into(),
            topic: "a.t".into(),
            partition: 0,
            upstream,
            downstream,
            metadata: String::new(),
        }
    }

    #[test]
    fn checkpoints_only_go_back_when_the_group_does() {
        assert!(due(None, 10, 10));
        assert!(!due(Some(&cp(10, 10)), 10, 10), "unchanged");
        assert!(due(Some(&cp(10, 10)), 20, 20));
        assert!(!due(Some(&cp(20, 20)), 25, 15), "translation went back while the group moved on");
        assert!(due(Some(&cp(90, 90)), 10, 10), "the group was rewound upstream");
    }

    #[test]
    fn group_sync_commits_only_what_the_flow_itself_checkpoints() {
        let at = |group: &str, topic: &str, partition| {
            let c = Checkpoint { group: group.into(), topic: topic.into(), partition, ..cp(5, 7) };
            ((group.to_string(), topic.to_string(), partition), c)
        };
        // Read back from a checkpoints topic other replicators of the same clusters share.
        let last: HashMap<CheckpointKey, Checkpoint> =
            [at("ours", "a.t", 1), at("ours", "a.t", 0), at("ours", "a.foreign", 0), at("theirs", "a.t", 0)]
                .into_iter()
                .collect();
        let owned: HashSet<CheckpointKey> =
            [("ours".into(), "a.t".into(), 0), ("ours".into(), "a.t".into(), 1), ("new".into(), "a.t".into(), 0)]
                .into_iter()
                .collect();
        let synced = owned_checkpoints(&last, &owned);
        assert_eq!(synced.keys().collect::<Vec<_>>(), vec!["ours"], "no foreign group, none without a checkpoint");
        assert_eq!(
            synced["ours"].iter().map(|c| (c.topic.as_str(), c.partition)).collect::<Vec<_>>(),
            vec![("a.t", 0), ("a.t", 1)],
            "no foreign topic"
        );
        assert!(owned_checkpoints(&last, &HashSet::new()).is_empty(), "nothing before the first round");
    }

    #[test]
    fn only_checkpoints_ahead_of_the_target_commit_are_synced() {
        let c = |topic: &str, offset| Committed { topic: topic.into(), partition: 0, offset, metadata: String::new() };
        let mut behind = cp(0, 50);
        behind.topic = "a.u".into();
        let got = ahead_of(&[cp(0, 100), behind], &[c("a.t", 80), c("a.u", 60)]);
        assert_eq!(got, vec![c("a.t", 100)]);
    }

    #[test]
    fn forward_and_back_translation_through_stored_records() {
        let mut t = Translation::default();
        // This flow (a->b): orders-0 replicated 0..120 exactly.
        t.forward.apply(
            &encode_key("orders", 0),
            Some(&encode_value(Stored { next: SourceOffset(120), open: Some(run(0, 0, 120)) })),
        );
        // The reverse flow (b->a): b's `pay`-0 from 10 landed at 0 on a, a marker at 15.
        t.back.apply(&encode_run_key("pay", 0, SourceOffset(10)), Some(&encode_run_value(run(10, 0, 5))));
        t.back.apply(
            &encode_key("pay", 0),
            Some(&encode_value(Stored { next: SourceOffset(30), open: Some(run(17, 5, 13)) })),
        );
        let naming = crate::policy::tests_support::default_naming();
        let all = TopicFilter::new(".*", "").expect("filter");
        let watched = t.watched(naming.as_ref(), &all, "a", "b").expect("names");
        let none = TopicFilter::new("other", "").expect("filter");
        assert_eq!(t.watched(naming.as_ref(), &none, "a", "b").expect("names").len(), 1, "only the way back");
        assert_eq!(
            watched.iter().map(|w| (w.source_topic.as_str(), w.target_topic.as_str(), w.back)).collect::<Vec<_>>(),
            vec![("b.pay", "pay", true), ("orders", "a.orders", false)]
        );
        let committed =
            |topic: &str, offset| Committed { topic: topic.into(), partition: 0, offset, metadata: "m".into() };
        let write = |verdict: Verdict| match verdict {
            Verdict::Write(c) => Some(c),
            _ => None,
        };
        let remote = Some(TargetExtent { start: TargetOffset(0), end: TargetOffset(125), stored_with_records: false });
        let forward = write(t.checkpoint("g", &watched[1], &committed("orders", 77), remote)).expect("covered");
        assert_eq!(
            (forward.topic.as_str(), forward.upstream, forward.downstream, forward.metadata.as_str()),
            ("a.orders", 77, 77, "m")
        );
        assert_eq!(
            t.checkpoint("g", &watched[1], &committed("orders", 130), remote),
            Verdict::Wait,
            "the target holds records past the stored position, maybe below the commit"
        );
        assert_eq!(t.checkpoint("g", &watched[1], &committed("orders", 77), None), Verdict::Wait, "no extent read");
        let back = write(t.checkpoint("g", &watched[0], &committed("b.pay", 7), None)).expect("covered");
        assert_eq!((back.topic.as_str(), back.upstream, back.downstream), ("pay", 7, 19));
        assert_eq!(
            write(t.checkpoint("g", &watched[0], &committed("b.pay", 5), None)).map(|c| c.downstream),
            Some(17),
            "the record after the marker"
        );
        assert_eq!(
            write(t.checkpoint("g", &watched[0], &committed("b.pay", 18), None)).map(|c| c.downstream),
            Some(30),
            "past everything replicated"
        );
    }
}
