//! What the middle stages do to a batch, as the pieces that work on records see it. The filter
//! decides per record whether it goes to the target (the policy's record hook, loop prevention
//! by provenance, conflict resolution; the hook's edits ride along in the batch); the transform
//! applies those edits. Dropped records still count as done for the partition's position (the
//! batch keeps `fetched_through`); a stage that fails stops the flow before the batch.

use super::batch::Batch;
use super::error::HookError;

/// A record filter, applied to a whole batch at once.
pub trait RecordFilter: Send {
    /// Removes records of `batch` (see [`Batch::retain`]); an error stops the flow before the batch.
    fn filter(&mut self, batch: &mut Batch) -> Result<(), HookError>;

    /// Whether the filter can take a batch now: a record hook whose component is being compiled
    /// again says no, so the batch waits without blocking the stage's thread.
    fn ready(&mut self) -> bool {
        true
    }
}

/// Replicates every record (a flow without a record hook).
#[derive(Debug, Default, Clone, Copy)]
pub struct KeepAll;

impl RecordFilter for KeepAll {
    fn filter(&mut self, _batch: &mut Batch) -> Result<(), HookError> {
        Ok(())
    }
}

/// Filters applied one after the other.
impl RecordFilter for Vec<Box<dyn RecordFilter>> {
    fn filter(&mut self, batch: &mut Batch) -> Result<(), HookError> {
        for f in self.iter_mut() {
            f.filter(batch)?;
        }
        Ok(())
    }

    fn ready(&mut self) -> bool {
        // Every filter is asked, so each starts what it must before the batch can pass.
        let mut all = true;
        for f in self.iter_mut() {
            all &= f.ready();
        }
        all
    }
}

/// A record transform, applied to a whole batch at once.
pub trait RecordTransform: Send {
    /// Rewrites records in place; an error stops the flow before the batch.
    fn transform(&mut self, batch: &mut Batch) -> Result<(), HookError>;

    /// Whether the transform can take `batch` now: one that needs something fetched first (a
    /// schema not yet on the target) says no and starts fetching it, so the batch waits without
    /// blocking the stage's thread.
    fn ready(&mut self, _batch: &Batch) -> bool {
        true
    }
}

/// Transforms applied one after the other.
impl RecordTransform for Vec<Box<dyn RecordTransform>> {
    fn transform(&mut self, batch: &mut Batch) -> Result<(), HookError> {
        for t in self.iter_mut() {
            t.transform(batch)?;
        }
        Ok(())
    }

    fn ready(&mut self, batch: &Batch) -> bool {
        let mut all = true;
        for t in self.iter_mut() {
            all &= t.ready(batch);
        }
        all
    }
}

/// Leaves records as they are (a flow without a record hook: no batch carries edits).
#[derive(Debug, Default, Clone, Copy)]
pub struct Unchanged;

impl RecordTransform for Unchanged {
    fn transform(&mut self, _batch: &mut Batch) -> Result<(), HookError> {
        Ok(())
    }
}
