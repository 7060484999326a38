//! One struct per thing that happens in strait. Each `emit()` writes the log line and bumps the
//! metric together, so logs and metrics never drift apart.
//!
//! Metric names follow one scheme: `strait_<subject>_<measure>[_<unit>]`, labelled with `flow`
//! (`source->target`) and, for per-partition series, the remote `topic` and `partition`.

mod active_active;
mod flows;
mod groups;
mod links;
mod partition;
mod topics;

pub use active_active::{ConflictsRefused, LoopsPrevented};
pub use flows::{
    AssignRetried, ConfigReloadRefused, ConfigReloaded, FlowLag, FlowStateChanged, MembershipRejoining,
    SettingsAgreement, ShutdownTimedOut, TasksChanged, TasksIdle, TransactionsAborted, TransactionsCommitted,
};
pub use groups::{CheckpointsEmitted, CheckpointsHeld, GroupOffsetsSynced, GroupSyncSkipped, OffsetRunsDeleted};
pub use links::{ClusterAnswered, ClusterUnanswered};
pub use partition::{AckRound, AckRounds, PartitionMetrics};
pub use topics::{
    AclSyncUnavailable, SchemaCopied, SchemaIdNotCopied, SchemaRecords, TopicAclsSynced, TopicConfigsSynced,
};

use metrics::{counter, gauge};
use tracing::{debug, error, info, warn};

/// A remote topic was created on the target.
pub struct TopicCreated<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// The remote topic's name.
    pub topic: &'a str,
    /// Its partition count (the source's).
    pub partitions: i32,
}

impl TopicCreated<'_> {
    /// Logs and counts the event.
    pub fn emit(&self) {
        info!(flow = self.flow, topic = self.topic, partitions = self.partitions, "created remote topic");
        counter!("strait_topics_created_total", "flow" => self.flow.to_string()).increment(1);
    }
}

/// A heartbeat was handed to the producer.
pub struct HeartbeatSent<'a> {
    /// `source->target`.
    pub flow: &'a str,
}

impl HeartbeatSent<'_> {
    /// Logs at trace level and counts.
    pub fn emit(&self) {
        tracing::trace!(flow = self.flow, "heartbeat sent");
        counter!("strait_heartbeats_sent_total", "flow" => self.flow.to_string()).increment(1);
        gauge!("strait_heartbeats_last_sent_timestamp_seconds", "flow" => self.flow.to_string()).set(unix_seconds());
    }
}

/// A replicated source topic was deleted; its remote topic stays.
pub struct TopicDeleted<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// The source topic.
    pub topic: &'a str,
}

impl TopicDeleted<'_> {
    /// Logs and counts the event.
    pub fn emit(&self) {
        info!(flow = self.flow, topic = self.topic, "source topic deleted; its partitions are no longer read and its positions are forgotten (the remote topic stays)");
        counter!("strait_source_topics_deleted_total", "flow" => self.flow.to_string()).increment(1);
    }
}

/// A remote topic had fewer partitions than its source and was grown.
pub struct PartitionsAdded<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// The remote topic's name.
    pub topic: &'a str,
    /// Partitions before.
    pub from: i32,
    /// Partitions after.
    pub to: i32,
}

impl PartitionsAdded<'_> {
    /// Logs and counts the event.
    pub fn emit(&self) {
        info!(
            flow = self.flow,
            topic = self.topic,
            from = self.from,
            to = self.to,
            "grew remote topic to the source's partition count"
        );
        counter!("strait_partitions_added_total", "flow" => self.flow.to_string())
            .increment((self.to - self.from) as u64);
    }
}

/// The fetcher now reads these many source partitions.
pub struct AssignmentChanged<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// Partitions newly assigned (negative: unassigned, their topic was deleted).
    pub added: i64,
    /// Partitions assigned in total.
    pub total: usize,
}

impl AssignmentChanged<'_> {
    /// Logs the change and sets the gauge.
    pub fn emit(&self) {
        info!(flow = self.flow, added = self.added, total = self.total, "source partitions assigned");
        gauge!("strait_source_partitions_assigned", "flow" => self.flow.to_string()).set(self.total as f64);
    }
}

/// Stored positions were read back at start-up.
pub struct PositionsLoaded<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// The topic they live in.
    pub topic: &'a str,
    /// How many partitions have a stored position.
    pub partitions: usize,
}

impl PositionsLoaded<'_> {
    /// Logs the event.
    pub fn emit(&self) {
        info!(flow = self.flow, topic = self.topic, partitions = self.partitions, "resuming from stored positions");
    }
}

/// Acknowledged positions were stored in the position topic (in a transactional mode: committed).
pub struct PositionsStored<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// How many partition positions were written.
    pub partitions: usize,
    /// How many closed runs of the offset mapping were written with them.
    pub runs: usize,
    /// Bytes the exact offset mapping added: closed run records, and the open run on position
    /// records.
    pub mapping_bytes: usize,
}

impl PositionsStored<'_> {
    /// Logs at debug level and counts.
    pub fn emit(&self) {
        tracing::debug!(flow = self.flow, partitions = self.partitions, runs = self.runs, "stored positions");
        let flow = self.flow.to_string();
        counter!("strait_positions_stored_total", "flow" => flow.clone()).increment(self.partitions as u64);
        counter!("strait_offset_runs_stored_total", "flow" => flow.clone()).increment(self.runs as u64);
        counter!("strait_offset_mapping_bytes_total", "flow" => flow).increment(self.mapping_bytes as u64);
    }
}

/// MM2-format offset syncs were handed to the producer.
pub struct OffsetSyncsSent<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// How many.
    pub syncs: usize,
    /// Their key and value bytes.
    pub bytes: usize,
}

impl OffsetSyncsSent<'_> {
    /// Counts (no log line: they are routine).
    pub fn emit(&self) {
        let flow = self.flow.to_string();
        counter!("strait_offset_syncs_sent_total", "flow" => flow.clone()).increment(self.syncs as u64);
        counter!("strait_offset_syncs_bytes_total", "flow" => flow).increment(self.bytes as u64);
    }
}

/// How many batches wait in a stage's input channel.
pub struct QueueDepth<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// `filter`, `transform` or `produce`: the stage the channel feeds.
    pub stage: &'static str,
    /// Batches waiting.
    pub batches: usize,
}

impl QueueDepth<'_> {
    /// Sets the gauge (no log: it changes on every batch).
    pub fn emit(&self) {
        gauge!("strait_stage_queue_batches", "flow" => self.flow.to_string(), "stage" => self.stage)
            .set(self.batches as f64);
    }
}

/// The target refused a record for good; the flow stops before it.
pub struct RecordRejected<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// Source topic.
    pub topic: &'a str,
    /// Source partition.
    pub partition: i32,
    /// Source offset of the refused record.
    pub offset: i64,
    /// What the target or client said.
    pub reason: &'a str,
}

impl RecordRejected<'_> {
    /// Logs at error level and counts.
    pub fn emit(&self) {
        error!(
            flow = self.flow,
            topic = self.topic,
            partition = self.partition,
            offset = self.offset,
            reason = self.reason,
            "target rejected a record; the flow stops before it"
        );
        counter!("strait_records_rejected_total", "flow" => self.flow.to_string()).increment(1);
    }
}

/// A transient problem the flow retries through.
pub struct FlowRetrying<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// What went wrong.
    pub what: &'a str,
}

impl FlowRetrying<'_> {
    /// Logs at warn level and counts.
    pub fn emit(&self) {
        warn!(flow = self.flow, what = self.what, "retrying");
        counter!("strait_flow_retries_total", "flow" => self.flow.to_string()).increment(1);
        crate::health::flow_retrying(self.flow, self.what);
    }
}

/// A policy component was reloaded from its file.
pub struct PolicyReloaded<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// The component's file.
    pub plugin: &'a str,
}

impl PolicyReloaded<'_> {
    /// Logs and counts.
    pub fn emit(&self) {
        info!(flow = self.flow, plugin = self.plugin, "policy reloaded; the next batch uses it");
        counter!("strait_policy_reloads_total", "flow" => self.flow.to_string(), "result" => "ok").increment(1);
    }
}

/// Records a policy component's record hook dropped: they are not replicated, and their
/// offsets count as done.
pub struct PolicyDropped<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// The component's file.
    pub plugin: &'a str,
    /// How many records of one batch.
    pub records: usize,
}

impl PolicyDropped<'_> {
    /// Logs and counts.
    pub fn emit(&self) {
        debug!(flow = self.flow, plugin = self.plugin, records = self.records, "dropped by the record hook");
        counter!("strait_records_dropped_total", "flow" => self.flow.to_string(), "reason" => "policy")
            .increment(self.records as u64);
    }
}

/// A changed policy file did not load; the running policy stays.
pub struct PolicyReloadFailed<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// The component's file.
    pub plugin: &'a str,
    /// Why.
    pub error: &'a str,
}

impl PolicyReloadFailed<'_> {
    /// Logs and counts.
    pub fn emit(&self) {
        warn!(
            flow = self.flow,
            plugin = self.plugin,
            error = self.error,
            "policy reload failed; keeping the running policy"
        );
        counter!("strait_policy_reloads_total", "flow" => self.flow.to_string(), "result" => "failed").increment(1);
    }
}

/// Wall-clock seconds since the epoch, for the `*_timestamp_seconds` gauges.
pub(crate) fn unix_seconds() -> f64 {
    crate::clock::now_millis() as f64 / 1000.0
}
