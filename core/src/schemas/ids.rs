//! Which schema ids of the source the flow's records may carry to the target, and as what: the
//! table the transform reads for every record and the schema worker fills.

use std::collections::HashMap;
use std::sync::RwLock;

/// What became of one source schema id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// The schema is on the target under this id (the source's own in `keep` mode).
    On(u32),
    /// The source registry does not know the id.
    Unknown,
    /// The id's subjects are all left out by `schema.subjects` or belong to topics the flow
    /// does not replicate.
    Excluded,
    /// Copying it failed in a way waiting will not mend; the flow stops with this message.
    Failed(String),
}

/// Source schema id → what it became, shared by a flow's transform and its schema worker.
#[derive(Debug, Default)]
pub struct IdTable {
    ids: RwLock<HashMap<u32, Resolved>>,
}

impl IdTable {
    /// What `id` became, if the worker resolved it.
    pub fn get(&self, id: u32) -> Option<Resolved> {
        self.ids.read().unwrap_or_else(|e| e.into_inner()).get(&id).cloned()
    }

    /// Whether `id` is resolved.
    pub fn has(&self, id: u32) -> bool {
        self.ids.read().unwrap_or_else(|e| e.into_inner()).contains_key(&id)
    }

    /// Records what `id` became.
    pub fn set(&self, id: u32, resolved: Resolved) {
        self.ids.write().unwrap_or_else(|e| e.into_inner()).insert(id, resolved);
    }
}
