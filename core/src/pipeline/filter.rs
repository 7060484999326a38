//! Filter: decides per record whether it goes to the target: the policy component's record
//! hook, loop prevention by provenance and conflict resolution (these two also mark what they
//! keep: a provenance header, a dead-letter route). The hook's edits ride along in the batch
//! for the transform stage. Dropped records still count as done for the partition's position
//! (the batch keeps `fetched_through`); a filter that fails stops the flow before the batch.

use super::batch::Batch;
use crate::policy::PolicyError;

/// A record filter, applied to a whole batch at once.
pub trait RecordFilter: Send {
    /// Removes records of `batch` (see [`Batch::retain`]); an error stops the flow before the batch.
    fn filter(&mut self, batch: &mut Batch) -> Result<(), PolicyError>;

    /// Whether the filter can take a batch now (see [`super::stage::Work::ready`]).
    fn ready(&mut self) -> bool {
        true
    }
}

/// Replicates every record (a flow without a record hook).
#[derive(Debug, Default, Clone, Copy)]
pub struct KeepAll;

impl RecordFilter for KeepAll {
    fn filter(&mut self, _batch: &mut Batch) -> Result<(), PolicyError> {
        Ok(())
    }
}

/// Filters applied one after the other.
impl RecordFilter for Vec<Box<dyn RecordFilter>> {
    fn filter(&mut self, batch: &mut Batch) -> Result<(), PolicyError> {
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
