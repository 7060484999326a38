//! Transform: may rewrite records on their way. Remote topic names are not decided here but
//! once per partition in the slot table, so they cost nothing per record.

use super::batch::Batch;

/// A record transform, applied to a whole batch at once.
pub trait RecordTransform: Send {
    /// Rewrites records in place.
    fn transform(&mut self, batch: &mut Batch);
}

/// Leaves records as they are.
#[derive(Debug, Default, Clone, Copy)]
pub struct Unchanged;

impl RecordTransform for Unchanged {
    fn transform(&mut self, _batch: &mut Batch) {}
}
