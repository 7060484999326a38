//! What `strait verify` is asked and what it answers.

use regex::Regex;
use serde::Serialize;

use super::compare::Findings;

/// One end of the window a verification covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// A source offset (the same in every partition).
    Offset(i64),
    /// The first source record written at or after this time, in milliseconds since the epoch.
    Time(i64),
}

/// What `strait verify` checks, and how.
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// Only source topics matching this (within the flow's own topics).
    pub topics: Option<Regex>,
    /// Start of the window (default: the oldest record the source and the mapping both have).
    pub from: Option<Bound>,
    /// End of the window, exclusive (default: the flow's stored position).
    pub until: Option<Bound>,
    /// Read at most this many bytes per second, both clusters together.
    pub max_bytes_per_second: Option<u64>,
    /// Count duplicates as a failure even in an at-least-once flow.
    pub fail_on_duplicates: bool,
}

/// One partition's result.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionVerdict {
    /// The source topic.
    pub topic: String,
    /// The partition (the same on both sides).
    pub partition: i32,
    /// The topic on the target.
    pub target_topic: String,
    /// Source offsets compared, `[from, until)`.
    pub source_range: (i64, i64),
    /// Target offsets read, `[from, until)`.
    pub target_range: (i64, i64),
    /// What the comparison found.
    pub findings: Findings,
    /// Source records the flow's policy drops or sends to another topic: not expected here.
    pub not_expected: u64,
    /// Why the partition was not compared, when it was not.
    pub skipped: Option<String>,
}

/// The result of a verification.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// `source->target`.
    pub flow: String,
    /// Whether the flow is exactly-once: a duplicate is a failure there.
    pub exactly_once: bool,
    /// Whether duplicates fail the verification.
    pub duplicates_fail: bool,
    /// Every partition, in topic and partition order.
    pub partitions: Vec<PartitionVerdict>,
    /// The counts over all partitions.
    pub total: Findings,
    /// Whether the copy verified clean.
    pub clean: bool,
    /// Bytes read from both clusters.
    pub bytes_read: u64,
    /// How long the verification took.
    pub seconds: f64,
}

/// How far a verification has come, for a progress line.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Partitions finished.
    pub partitions_done: usize,
    /// Partitions to check.
    pub partitions: usize,
    /// Records read so far, both sides.
    pub records: u64,
    /// Bytes read so far, both sides.
    pub bytes: u64,
}
