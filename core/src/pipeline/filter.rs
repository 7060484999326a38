//! Filter: decides per record whether it goes to the target. Dropped records still count as
//! done for the partition's position (the batch keeps `fetched_through`).

use super::batch::Batch;

/// A record filter, applied to a whole batch at once.
pub trait RecordFilter: Send {
    /// Removes the records that must not be replicated.
    fn filter(&mut self, batch: &mut Batch);
}

/// Replicates every record.
#[derive(Debug, Default, Clone, Copy)]
pub struct KeepAll;

impl RecordFilter for KeepAll {
    fn filter(&mut self, _batch: &mut Batch) {}
}
