//! One checkpoint round of a flow: the groups' commits read, then their checkpoints written as
//! their translations settle ([`crate::offsets::Settled`]). A round whose translations wait
//! for the flow's next stored positions stays open across ticks of the shared checkpoint
//! thread, so it holds up no other flow's round.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::producer::BaseRecord;

use super::{CheckpointTask, Committed, Translation, Verdict, Watched, ROUND_STEP_TIMEOUT};
use crate::events::{CheckpointsEmitted, CheckpointsHeld, FlowRetrying, OffsetRunsDeleted};
use crate::offsets::mm2::Checkpoint;
use crate::offsets::store::{encode_run_key, Mappings};
use crate::offsets::TargetExtent;
use crate::pipeline::StageError;
use crate::record::SourceOffset;

/// How long a checkpoint round waits for stored positions to cover what the target holds: two
/// position stores (flushes, or transactions in exactly-once) and a second, at most one round
/// step.
pub fn settle_within(flush: Duration) -> Duration {
    (flush * 2 + Duration::from_secs(1)).min(ROUND_STEP_TIMEOUT)
}

/// How often an open round reads the position topic again.
const SETTLE_POLL: Duration = Duration::from_millis(100);

/// A checkpoint round between reading the groups' commits and writing the last checkpoint it
/// can.
pub struct Round {
    /// The partitions the round translates, by source (topic, partition).
    watched: HashMap<(String, i32), Watched>,
    /// Their remote partitions' extents, read after the commits, by source (topic, partition).
    extents: HashMap<(String, i32), TargetExtent>,
    /// Commits whose checkpoints are not written yet.
    pending: Vec<(Arc<str>, Committed)>,
    /// Every group's oldest commit per partition, for pruning; `None` when a group could not
    /// be read.
    oldest: Option<HashMap<(String, i32), SourceOffset>>,
    /// Whether the reverse flow's positions are read too (its position topic exists).
    back: bool,
    started: Instant,
    next_look: Instant,
    written: usize,
    moved: HashSet<Arc<str>>,
}

impl CheckpointTask {
    /// Starts a round: reads the positions, the groups' commits and the remote extents, and
    /// writes every checkpoint that is settled already.
    pub(super) fn start_round(
        &mut self,
        translation: &mut Translation,
        back_found: &mut bool,
    ) -> Result<Round, StageError> {
        self.forward_tail.catch_up(ROUND_STEP_TIMEOUT, |k, v| translation.forward.apply(k, v))?;
        // The reverse flow's positions live on this flow's source; it may start later.
        if !*back_found {
            *back_found = self.source_groups.topic_exists(self.back_tail.topic())?;
        }
        if *back_found {
            self.back_tail.catch_up(ROUND_STEP_TIMEOUT, |k, v| translation.back.apply(k, v))?;
            // The reverse flow deletes the runs of its own deleted topics.
            translation.back.orphaned.clear();
        }
        let watched =
            translation.watched(self.naming.as_ref(), &self.topics, &self.source_alias, &self.target_alias)?;
        let partitions: Vec<(String, i32)> = watched.iter().map(|w| (w.source_topic.clone(), w.partition)).collect();
        let watched: HashMap<(String, i32), Watched> =
            watched.into_iter().map(|w| ((w.source_topic.clone(), w.partition), w)).collect();

        // Pruning the mapping needs the oldest offset of every group: a group not read this
        // round could be the one still needing a run.
        let mut held = Vec::new();
        let mut oldest: HashMap<(String, i32), SourceOffset> = HashMap::new();
        let groups = self.groups(&mut held)?;
        let mut owned = HashSet::new();
        let mut pending: Vec<(Arc<str>, Committed)> = Vec::new();
        for (group, committed) in self.source_groups.committed_by_group(&groups, &partitions) {
            // A group whose offsets could not be read is held back alone, until a later round.
            let committed = match committed {
                Ok(committed) => committed,
                Err(e) => {
                    self.hold(group, e, &mut held);
                    continue;
                }
            };
            for c in committed.iter().filter(|c| c.offset >= 0) {
                let at = oldest.entry((c.topic.clone(), c.partition)).or_insert(SourceOffset(c.offset));
                *at = (*at).min(SourceOffset(c.offset));
            }
            owned.extend(committed.iter().filter_map(|c| {
                let w = watched.get(&(c.topic.clone(), c.partition))?;
                Some((group.clone(), w.target_topic.clone(), c.partition))
            }));
            let group: Arc<str> = group.into();
            pending.extend(committed.into_iter().map(|c| (group.clone(), c)));
        }
        // A group held back this round keeps what it covered before.
        owned.extend(self.owned.iter().filter(|(g, _, _)| held.contains(g)).cloned());
        self.owned = owned;
        // Read after the commits: what the stored positions must reflect.
        let extents = self.target_extents(&watched);
        let now = Instant::now();
        Ok(Round {
            watched,
            extents,
            pending,
            oldest: held.is_empty().then_some(oldest),
            back: *back_found,
            started: now,
            next_look: now,
            written: 0,
            moved: HashSet::new(),
        })
    }

    /// Writes what settled since the last look; true once the round is over: nothing left, or
    /// what is left held for the next round after [`CheckpointTask::settle_within`].
    pub(super) fn settle(&mut self, round: &mut Round, translation: &mut Translation) -> bool {
        let now = Instant::now();
        if now < round.next_look {
            return false;
        }
        if now > round.started {
            // The flows store what their targets acknowledged every flush: read their positions
            // again, this flow's and, for failback, the reverse flow's.
            if let Err(e) = self.forward_tail.catch_up(ROUND_STEP_TIMEOUT, |k, v| translation.forward.apply(k, v)) {
                FlowRetrying { flow: &self.flow, what: &format!("checkpoints: {e}") }.emit();
            }
            if round.back {
                if let Err(e) = self.back_tail.catch_up(ROUND_STEP_TIMEOUT, |k, v| translation.back.apply(k, v)) {
                    FlowRetrying { flow: &self.flow, what: &format!("checkpoints: {e}") }.emit();
                }
                translation.back.orphaned.clear();
            }
        }
        let settling = round.started.elapsed() < self.settle_within;
        let (mut waiting, mut held) = (Vec::new(), 0);
        for (group, c) in std::mem::take(&mut round.pending) {
            let id = (c.topic.clone(), c.partition);
            let Some(w) = round.watched.get(&id) else { continue };
            let checkpoint = match translation.checkpoint(&group, w, &c, round.extents.get(&id).copied()) {
                Verdict::Write(checkpoint) => checkpoint,
                // A group ahead of replication gets where the next record lands once the flow
                // did not catch up with it within the wait.
                Verdict::Ahead(checkpoint) if !settling => checkpoint,
                Verdict::Ahead(_) | Verdict::Wait if settling => {
                    waiting.push((group, c));
                    continue;
                }
                Verdict::Wait => {
                    held += 1;
                    continue;
                }
                Verdict::Ahead(_) | Verdict::Skip => continue,
            };
            if self.write_checkpoint(checkpoint) {
                round.written += 1;
                round.moved.insert(group);
            }
        }
        if held > 0 {
            CheckpointsHeld { flow: &self.flow, checkpoints: held, waited: round.started.elapsed() }.emit();
        }
        round.pending = waiting;
        round.next_look = Instant::now() + SETTLE_POLL;
        round.pending.is_empty()
    }

    /// Ends a round: flushes its checkpoints, reports them, and prunes the mapping.
    pub(super) fn finish_round(&mut self, round: Round, translation: &mut Translation) {
        if round.written > 0 {
            let _ = self.producer.flush(ROUND_STEP_TIMEOUT);
        }
        CheckpointsEmitted { flow: &self.flow, groups: round.moved.len(), checkpoints: round.written }.emit();
        // A run can only go when a later one exists: partitions with one run cost no request.
        let prunable: Vec<(String, i32)> = round
            .watched
            .iter()
            .filter(|(_, w)| !w.back)
            .map(|(id, _)| id.clone())
            .filter(|id| translation.forward.partitions.get(id).is_some_and(|m| m.runs().nth(1).is_some()))
            .collect();
        self.prune(&mut translation.forward, &prunable, round.oldest.as_ref());
    }

    /// Writes `checkpoint` if it moved since the last written; whether it did.
    fn write_checkpoint(&mut self, checkpoint: Checkpoint) -> bool {
        let key = (checkpoint.group.clone(), checkpoint.topic.clone(), checkpoint.partition);
        if !super::due(self.last.get(&key), checkpoint.upstream, checkpoint.downstream) {
            return false;
        }
        let (k, v) = (checkpoint.encode_key(), checkpoint.encode_value());
        if let Err((e, _)) = self.producer.send(BaseRecord::to(&self.topic).key(&k[..]).payload(&v[..])) {
            FlowRetrying { flow: &self.flow, what: &format!("checkpoint to {} not sent: {e}", self.topic) }.emit();
            return false;
        }
        self.last.insert(key, checkpoint);
        true
    }

    /// The remote partitions' extents on the target by source (topic, partition), read after
    /// the groups' commits; none when the target does not answer (the round then writes no
    /// forward checkpoint).
    fn target_extents(&self, watched: &HashMap<(String, i32), Watched>) -> HashMap<(String, i32), TargetExtent> {
        let remote: Vec<(String, i32)> =
            watched.values().filter(|w| !w.back).map(|w| (w.target_topic.clone(), w.partition)).collect();
        let extents = self.target_groups.extents(&remote).unwrap_or_else(|e| {
            FlowRetrying { flow: &self.flow, what: &format!("checkpoints: reading the remote partitions' ends: {e}") }
                .emit();
            HashMap::new()
        });
        watched
            .iter()
            .filter_map(|(id, w)| {
                let mut extent = *extents.get(&(w.target_topic.clone(), w.partition))?;
                extent.stored_with_records = self.stored_with_records;
                Some((id.clone(), extent))
            })
            .collect()
    }

    /// Deletes the runs of the flow's own mapping that no translation needs any more (see
    /// [`crate::offsets::PartitionMap::obsolete`]), and those of deleted source topics, so the
    /// position topic stays bounded. `oldest` is every group's oldest committed offset per
    /// partition, when every group could be read. Only the forward mapping: the reverse flow
    /// prunes its own, against the groups of its source.
    fn prune(
        &mut self,
        forward: &mut Mappings,
        partitions: &[(String, i32)],
        oldest: Option<&HashMap<(String, i32), SourceOffset>>,
    ) {
        if partitions.is_empty() && forward.orphaned.is_empty() {
            return;
        }
        let topic = self.forward_tail.topic().to_string();
        let starts = match self.source_groups.log_starts(partitions) {
            Ok(starts) => starts,
            Err(e) => {
                FlowRetrying { flow: &self.flow, what: &format!("deleting offset runs in {topic}: {e}") }.emit();
                return;
            }
        };
        let mut dead: Vec<((String, i32), SourceOffset)> = forward.orphaned.iter().cloned().collect();
        for id in partitions {
            let Some(map) = forward.partitions.get(id) else { continue };
            // A partition no group committed on keeps its runs back to the log start: a group
            // that turns up later at any offset still gets an exact answer.
            let needed = oldest.and_then(|o| o.get(id).copied());
            dead.extend(
                map.obsolete(starts.get(id).copied(), needed).into_iter().map(|upstream| (id.clone(), upstream)),
            );
        }
        if dead.is_empty() {
            return;
        }
        for ((source_topic, partition), upstream) in &dead {
            let key = encode_run_key(source_topic, *partition, *upstream);
            if let Err((e, _)) = self.producer.send(BaseRecord::<[u8], [u8]>::to(&topic).key(&key[..])) {
                FlowRetrying { flow: &self.flow, what: &format!("deleting offset runs in {topic}: {e}") }.emit();
                return;
            }
        }
        if let Err(e) = self.producer.flush(ROUND_STEP_TIMEOUT) {
            // Not forgotten here: the next round finds the same runs and deletes them again.
            FlowRetrying { flow: &self.flow, what: &format!("deleting offset runs in {topic}: {e}") }.emit();
            return;
        }
        for (id, upstream) in &dead {
            forward.orphaned.remove(&(id.clone(), *upstream));
            if let Some(map) = forward.partitions.get_mut(id) {
                map.forget(*upstream);
            }
        }
        OffsetRunsDeleted { flow: &self.flow, runs: dead.len() }.emit();
    }
}
