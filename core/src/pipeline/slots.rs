//! The source topic-partitions a flow replicates, numbered once and shared by every stage.
//! Records carry the number (a [`SlotId`]) instead of topic names.

use std::sync::{Arc, RwLock, RwLockReadGuard};

use crate::events::PartitionMetrics;
use crate::offsets::Run;
use crate::record::{SlotId, SourceOffset};

/// One replicated source partition and where it goes.
#[derive(Clone)]
pub struct Slot {
    /// Source topic.
    pub source_topic: Arc<str>,
    /// Partition number, the same on source and target.
    pub partition: i32,
    /// The remote topic on the target, named once by the policy.
    pub remote_topic: Arc<str>,
    /// Metric handles of the remote topic-partition.
    pub metrics: PartitionMetrics,
    /// The open run of the offset mapping a previous lifetime stored.
    pub resume_run: Option<Run>,
    /// Where reading starts when it was resolved at assignment rather than stored (a partition
    /// read from its end): the position to store at once, so a restart does not skip records
    /// produced in between.
    pub start_at: Option<SourceOffset>,
    /// The source topic was deleted: the slot is no longer read and its stored position is to be
    /// forgotten.
    pub retired: bool,
}

/// The flow's slot table. Slots are only ever appended, so an id stays valid for the run.
#[derive(Clone, Default)]
pub struct Slots {
    inner: Arc<RwLock<Vec<Slot>>>,
}

impl Slots {
    /// Appends a slot and returns its id.
    pub fn add(&self, slot: Slot) -> SlotId {
        let mut table = self.inner.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        table.push(slot);
        (table.len() - 1) as SlotId
    }

    /// Marks a slot's topic as deleted on the source.
    pub fn retire(&self, id: SlotId) {
        let mut table = self.inner.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(slot) = table.get_mut(id as usize) {
            slot.retired = true;
        }
    }

    /// Read access to the table, for a whole batch at a time.
    pub fn read(&self) -> RwLockReadGuard<'_, Vec<Slot>> {
        self.inner.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
