//! The policy's record hook as the filter stage runs it: the batch goes to the component with
//! its records' source topics, the records the verdict drops leave the batch, and its edits
//! ride along in the batch for the transform stage ([`super::ApplyEdits`]).

use super::slots::Slots;
use crate::config::FlowConfig;
use crate::events::PolicyDropped;
use crate::policy::{BatchHook, PolicyInstance};
use crate::record::{Batch, HookError, RecordFilter};

/// Runs a component's record hook on every batch of a flow, as its filter.
pub struct RecordHook {
    flow: String,
    hook: BatchHook,
    slots: Slots,
}

impl RecordHook {
    /// Wraps an instance whose component implements `records`, for the flow named `flow`.
    pub fn new(instance: PolicyInstance, slots: Slots, flow: &str) -> Self {
        Self { flow: flow.to_string(), hook: BatchHook::new(instance), slots }
    }

    /// Reloads the component from `flow`'s `replication.policy.wasm` when the file changes or
    /// on SIGHUP, between two batches, so no record is lost or handled twice.
    pub fn reloading(mut self, flow: &FlowConfig) -> Self {
        self.hook = self.hook.reloading(flow);
        self
    }

    /// Packs `batch` for the hook (see [`BatchHook::pack`]).
    pub fn pack(&mut self, batch: &mut Batch) {
        // The slot table is read only while packing, not across the call: adding a partition
        // does not wait for the hook.
        let slots = self.slots.read();
        self.hook.pack(batch, |slot| slots.get(slot as usize).map(|s| s.source_topic.to_string()).unwrap_or_default());
    }

    /// Gives the buffer [`Self::pack`] lent back to `batch`.
    pub fn unpack(&mut self, batch: &mut Batch) {
        self.hook.unpack(batch);
    }
}

impl RecordFilter for RecordHook {
    fn ready(&mut self) -> bool {
        self.hook.ready()
    }

    fn filter(&mut self, batch: &mut Batch) -> Result<(), HookError> {
        if batch.records.is_empty() {
            return Ok(());
        }
        self.pack(batch);
        let verdict = self.hook.call();
        self.unpack(batch);
        let verdict = verdict?;
        if verdict.drop.is_empty() && verdict.edits.is_empty() {
            return Ok(()); // "no change": the batch goes on untouched
        }
        let plugin = self.hook.name().to_string();
        let bad = |cause: String| HookError { plugin: format!("policy {plugin}"), hook: "records.on-batch", cause };
        let len = batch.records.len();
        for e in verdict.edits {
            if e.position as usize >= len {
                return Err(bad(format!("edit names record {} of {len}", e.position)));
            }
            batch.edits.push(e);
        }
        if !verdict.drop.is_empty() {
            let mut keep = vec![true; len];
            for &i in &verdict.drop {
                *keep.get_mut(i as usize).ok_or_else(|| bad(format!("drop names record {i} of {len}")))? = false;
            }
            batch.retain(&keep);
            PolicyDropped { flow: &self.flow, plugin: &plugin, records: len - batch.records.len() }.emit();
        }
        Ok(())
    }
}
