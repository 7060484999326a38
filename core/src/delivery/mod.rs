//! How a flow makes what it replicated durable: the delivery modes as one strategy,
//! [`Commit`], apart from all I/O.
//!
//! - **At-least-once**: a partition's position is written after the records it covers were
//!   acknowledged, every `offset.flush.interval.ms`, through the records' own producer.
//! - **Fenced** (at-least-once in a group of processes): the same positions, each flush one
//!   transaction carrying the group membership, written by a [`Writer`] of its own, so a process
//!   the group dropped cannot overwrite its successor's positions.
//! - **Transactional** (exactly-once): records and the positions they reach are committed in one
//!   transaction per lane every `transaction.boundary.interval.ms`; a stop or a failure that
//!   cannot commit aborts it.
//!
//! The produce stage sends records and takes acknowledgements; the strategy decides when
//! positions are taken from the ledger ([`Book`]), how they are written and when they count as
//! stored, and when transactions begin, commit and abort, over a [`Lane`]. It reads no clock
//! (the caller passes `now`) and does no I/O, so every history of acknowledgements, refusals,
//! fences and failed commits can be replayed against fakes (see the tests).

mod commit;
#[cfg(test)]
mod tests;

use std::time::Duration;

pub use commit::{Commit, Gate, Progress};

/// Which delivery mode a flow runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Positions follow acknowledgements, written through the records' producer.
    AtLeastOnce,
    /// Positions follow acknowledgements, written by a [`Writer`] in transactions fenced by the
    /// group membership.
    Fenced,
    /// Records and positions are committed together.
    Transactional,
}

/// What one position record counts as once it is stored, for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Partition positions.
    pub partitions: usize,
    /// Closed runs of the offset mapping.
    pub runs: usize,
    /// Bytes the offset mapping added.
    pub mapping_bytes: usize,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.partitions += other.partitions;
        self.runs += other.runs;
        self.mapping_bytes += other.mapping_bytes;
    }

    /// Whether nothing is counted.
    pub fn is_empty(&self) -> bool {
        self.partitions + self.runs == 0
    }
}

/// One record for the position topic, encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PositionRecord {
    /// The source partition it is about: its lane writes it, with the records it covers.
    pub partition: i32,
    /// The record's key.
    pub key: Vec<u8>,
    /// Its value; `None` for a tombstone.
    pub value: Option<Vec<u8>>,
    /// What it counts as once stored.
    pub counts: Counts,
}

/// What became of a position record handed to a lane's producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Queued; its acknowledgement comes later.
    Taken,
    /// The producer's queue is full: hand it over again later.
    Full,
    /// Refused for good.
    Failed(String),
}

/// Where an abort of every lane's transaction stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Abort {
    /// A lane's abort is still under way: call again.
    Pending,
    /// Every lane's transaction is aborted.
    Done,
    /// Every lane is done, and this is what the first that could not abort said: fenced, say.
    /// Its transaction, if any, is left to the coordinator's timeout or to the task's next
    /// owner, which aborts it.
    Failed(String),
}

/// The flow's producers on the target, as the strategy sees them: records were sent through
/// them by the produce stage; the strategy writes positions and runs transactions.
pub trait Lane {
    /// The lane that writes source partition `partition`; `None` when this process owns no
    /// task for it.
    fn lane_of(&self, partition: i32) -> Option<usize>;
    /// Hands a position record to lane `lane`'s producer.
    fn write(&mut self, lane: usize, record: &PositionRecord) -> Write;
    /// Serves acknowledgements, waiting at most `wait`.
    fn poll(&mut self, wait: Duration);
    /// Records and position writes not yet acknowledged, over every lane.
    fn in_flight(&self) -> usize;
    /// Opens a transaction on every lane.
    fn begin(&mut self) -> Result<(), String>;
    /// Commits every lane's transaction, waiting at most `wait` per lane: `Ok(true)` once all
    /// are committed, `Ok(false)` while one is still under way (call again).
    fn commit(&mut self, wait: Duration) -> Result<bool, String>;
    /// Aborts every lane's open transaction, waiting at most `wait` per lane.
    fn abort(&mut self, wait: Duration) -> Abort;
}

/// The ledger of acknowledgements, as the strategy sees it.
pub trait Book {
    /// The position records the acknowledgements so far call for, in the order they must be
    /// written (closed runs before the position that follows them).
    fn take(&mut self) -> Vec<PositionRecord>;
    /// Position writes handed over were lost: the ledger gives them again at the next take.
    fn lost(&mut self);
    /// Whether the target refused a record for good.
    fn refused(&self) -> bool;
}

/// What became of the batch last handed to a [`Writer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Still being written.
    Pending,
    /// Nothing is under way.
    Idle,
    /// The batch handed over last is committed.
    Committed,
    /// Not stored (the group refused this process, say); the positions must be written again.
    Failed(String),
    /// The writer cannot go on: the flow must restart with a new one.
    Broken(String),
}

/// The fenced mode's position writer.
pub trait Writer {
    /// Hands over one transaction's worth of position records; `false` if the writer could not
    /// take them.
    fn hand_over(&mut self, batch: Vec<PositionRecord>) -> bool;
    /// The outcome of the last batch, waiting for it at most `wait`.
    fn outcome(&mut self, wait: Duration) -> Outcome;
    /// Whether a batch is being written.
    fn busy(&self) -> bool;
}

/// What the strategy tells the world: each call is one thing that happened.
pub trait Report {
    /// Position records were stored: acknowledged, or committed in a transactional mode.
    fn stored(&mut self, counts: Counts);
    /// Every lane committed; `took` from the start of the commit.
    fn committed(&mut self, took: Duration);
    /// The open transactions were aborted, or could not be (`failure`).
    fn aborted(&mut self, why: &str, failure: Option<&str>);
    /// Something failed and is tried again, or given up on at a stop.
    fn retrying(&mut self, what: &str);
    /// The records acknowledged so far are readable on the target: offset syncs for them may
    /// go out.
    fn readable(&mut self);
}

/// Everything the strategy drives, borrowed for one call.
pub struct Io<'a> {
    /// The target lanes.
    pub lane: &'a mut dyn Lane,
    /// The ledger.
    pub book: &'a mut dyn Book,
    /// The fenced mode's writer.
    pub writer: Option<&'a mut dyn Writer>,
    /// Where events go.
    pub report: &'a mut dyn Report,
}
