//! Events of the checkpoint task: checkpoints written and group offsets synced.

use metrics::{counter, gauge};
use tracing::{debug, info, warn};

/// A round of checkpoints was written.
pub struct CheckpointsEmitted<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// Groups that got at least one new checkpoint.
    pub groups: usize,
    /// Checkpoint records written.
    pub checkpoints: usize,
}

impl CheckpointsEmitted<'_> {
    /// Logs (at debug level when nothing moved), counts, and sets the time of the last completed
    /// round (written or not: a round where no group moved is a healthy one).
    pub fn emit(&self) {
        if self.checkpoints > 0 {
            info!(flow = self.flow, groups = self.groups, checkpoints = self.checkpoints, "checkpoints written");
        } else {
            debug!(flow = self.flow, "no group moved; no checkpoints written");
        }
        counter!("strait_checkpoints_written_total", "flow" => self.flow.to_string())
            .increment(self.checkpoints as u64);
        gauge!("strait_checkpoints_last_round_timestamp_seconds", "flow" => self.flow.to_string())
            .set(super::unix_seconds());
    }
}

/// Checkpoints a round did not write because the stored positions had not caught up with what
/// the target held when the groups' commits were read (see [`crate::offsets::Settled`]); the
/// next round tries again.
pub struct CheckpointsHeld<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// Checkpoints held back.
    pub checkpoints: usize,
    /// How long the round waited for the positions.
    pub waited: std::time::Duration,
}

impl CheckpointsHeld<'_> {
    /// Logs at warn level (the positions lag by more than two flushes, or the flow has replicated
    /// nothing of a partition its groups read) and counts.
    pub fn emit(&self) {
        warn!(
            flow = self.flow,
            checkpoints = self.checkpoints,
            waited_ms = self.waited.as_millis() as u64,
            "checkpoints held back until a later round: the stored positions do not cover what the target holds yet"
        );
        counter!("strait_checkpoints_held_total", "flow" => self.flow.to_string()).increment(self.checkpoints as u64);
    }
}

/// Runs of the offset mapping that no translation needs any more were deleted from the
/// position topic (tombstones), keeping it bounded.
pub struct OffsetRunsDeleted<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// Run records tombstoned this round.
    pub runs: usize,
}

impl OffsetRunsDeleted<'_> {
    /// Logs at debug level (it happens every round on a transactional source) and counts.
    pub fn emit(&self) {
        debug!(flow = self.flow, runs = self.runs, "offset mapping runs deleted");
        counter!("strait_offset_runs_deleted_total", "flow" => self.flow.to_string()).increment(self.runs as u64);
    }
}

/// A group's translated offsets were committed on the target.
pub struct GroupOffsetsSynced<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// The group.
    pub group: &'a str,
    /// Partitions whose offset moved forward.
    pub partitions: usize,
}

impl GroupOffsetsSynced<'_> {
    /// Logs and counts.
    pub fn emit(&self) {
        info!(flow = self.flow, group = self.group, partitions = self.partitions, "group offsets synced to the target");
        counter!("strait_group_offsets_synced_total", "flow" => self.flow.to_string())
            .increment(self.partitions as u64);
    }
}

/// A group was left alone on the target because consumers are in it there.
pub struct GroupSyncSkipped<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// The group.
    pub group: &'a str,
    /// Its members on the target.
    pub members: usize,
}

impl GroupSyncSkipped<'_> {
    /// Logs at debug level and counts.
    pub fn emit(&self) {
        debug!(
            flow = self.flow,
            group = self.group,
            members = self.members,
            "group is active on the target; offsets not synced"
        );
        counter!("strait_group_sync_skipped_total", "flow" => self.flow.to_string()).increment(1);
    }
}
