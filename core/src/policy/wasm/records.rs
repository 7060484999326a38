//! The record hook: a batch crosses into the component as one packed buffer (see
//! `types.batch` in the WIT), and only the records the verdict names are touched on the way back.

use super::bindings::strait::policy::types::{Batch as WitBatch, Verdict};
use super::engine::PolicyEngine;
use super::error::PolicyError;
use super::instance::PolicyInstance;
use super::reload::ReloadWatch;
use crate::config::FlowConfig;
use crate::events::{PolicyDropped, PolicyReloadFailed, PolicyReloaded};
use crate::pipeline::Slots;
use crate::record::{Batch, HookError, RecordEdit, RecordFilter, SlotId, NULL};

/// Where a hook's component came from, to load it again when it changes.
struct Reload {
    watch: ReloadWatch,
    flow: FlowConfig,
    /// A new instance being compiled on a thread of its own: compiling takes up to seconds,
    /// and the stage thread serves other flows meanwhile.
    loading: Option<crossbeam_channel::Receiver<Result<PolicyInstance, PolicyError>>>,
}

/// `u32` entries per record in the packed index.
const STRIDE: usize = 8;

/// Runs a component's record hook on every batch of a flow, as its filter stage: the records
/// the verdict drops leave the batch, and its edits ride along in the batch for the transform
/// stage (the pipeline's `ApplyEdits`).
pub struct RecordHook {
    flow: String,
    instance: PolicyInstance,
    slots: Slots,
    packed: WitBatch,
    reload: Option<Reload>,
}

impl RecordHook {
    /// Wraps an instance whose component implements `records`, for the flow named `flow`.
    pub fn new(instance: PolicyInstance, slots: Slots, flow: &str) -> Self {
        Self {
            flow: flow.to_string(),
            instance,
            slots,
            packed: WitBatch { topics: Vec::new(), index: Vec::new(), timestamps: Vec::new(), data: Vec::new() },
            reload: None,
        }
    }

    /// Reloads the component from `flow`'s `replication.policy.wasm` when the file changes or
    /// on SIGHUP, between two batches, so no record is lost or handled twice.
    pub fn reloading(mut self, flow: &FlowConfig) -> Self {
        if let Some(path) = &flow.policy_wasm {
            self.reload = Some(Reload { watch: ReloadWatch::new(path), flow: flow.clone(), loading: None });
        }
        self
    }

    /// Whether the hook can take a batch: `false` while a new component compiles on its own
    /// thread after the file changed or a reload was requested, so the next batch meets the
    /// new policy without the stage thread waiting for the compiler. A file that does not load
    /// keeps the running instance (the operator may be half-way through a copy).
    fn reload_ready(&mut self) -> bool {
        let Some(r) = self.reload.as_mut() else { return true };
        let flow_name = r.flow.name();
        let plugin = r.watch.path.display().to_string();
        if let Some(loading) = &r.loading {
            let loaded = match loading.try_recv() {
                Ok(loaded) => loaded,
                Err(crossbeam_channel::TryRecvError::Empty) => return false,
                Err(crossbeam_channel::TryRecvError::Disconnected) => {
                    Err(PolicyError::Incompatible { plugin: plugin.clone(), reason: "loading it panicked".into() })
                }
            };
            r.loading = None;
            match loaded {
                Ok(instance) => {
                    self.instance = instance;
                    PolicyReloaded { flow: &flow_name, plugin: &plugin }.emit();
                }
                Err(e) => PolicyReloadFailed { flow: &flow_name, plugin: &plugin, error: &e.to_string() }.emit(),
            }
            return true;
        }
        // One stat per batch (about a microsecond) makes the swap land at the first batch after
        // the new instance is ready.
        if !r.watch.changed() {
            return true;
        }
        let (tx, rx) = crossbeam_channel::bounded(1);
        let (path, flow) = (r.watch.path.clone(), r.flow.clone());
        let spawned = std::thread::Builder::new().name("policy reload".into()).spawn(move || {
            let loaded = PolicyEngine::shared()
                .and_then(|engine| engine.load_file(&path))
                .and_then(|component| component.instantiate(&flow))
                .and_then(|instance| {
                    if instance.hooks().records {
                        Ok(instance)
                    } else {
                        Err(PolicyError::Incompatible {
                            plugin: path.display().to_string(),
                            reason: "the new component has no record hook".into(),
                        })
                    }
                });
            let _ = tx.send(loaded);
        });
        match spawned {
            Ok(_) => {
                r.loading = Some(rx);
                false
            }
            Err(e) => {
                PolicyReloadFailed {
                    flow: &flow_name,
                    plugin: &plugin,
                    error: &format!("no thread to compile it on: {e}"),
                }
                .emit();
                true
            }
        }
    }

    /// Packs `batch` into the reusable buffers: the index of every record's parts, and the
    /// batch's own buffer, lent to the hook until [`Self::unpack`] gives it back.
    pub fn pack(&mut self, batch: &mut Batch) {
        let p = &mut self.packed;
        p.topics.clear();
        p.index.clear();
        p.timestamps.clear();
        p.index.reserve(batch.records.len() * STRIDE);
        p.timestamps.reserve(batch.records.len());
        let slots = self.slots.read();
        let mut topic_of: Vec<(SlotId, u32)> = Vec::new();
        for r in &batch.records {
            let topic = match topic_of.iter().find(|(s, _)| *s == r.slot) {
                Some(&(_, t)) => t,
                None => {
                    let name = slots.get(r.slot as usize).map(|s| s.source_topic.to_string()).unwrap_or_default();
                    let t = match p.topics.iter().position(|n| *n == name) {
                        Some(t) => t as u32,
                        None => {
                            p.topics.push(name);
                            (p.topics.len() - 1) as u32
                        }
                    };
                    topic_of.push((r.slot, t));
                    t
                }
            };
            let (ko, kl) = r.key.map_or((0, NULL), |s| (s.start, s.len));
            let (vo, vl) = r.value.map_or((0, NULL), |s| (s.start, s.len));
            p.index.extend_from_slice(&[topic, ko, kl, vo, vl, r.headers.start, r.headers.len, 0]);
            p.timestamps.push(r.timestamp);
        }
        p.data = batch.take_data();
    }

    /// Gives the buffer [`Self::pack`] lent back to `batch`.
    pub fn unpack(&mut self, batch: &mut Batch) {
        batch.restore_data(std::mem::take(&mut self.packed.data));
    }

    /// Calls the hook on the packed batch.
    pub fn call(&mut self) -> Result<Verdict, HookError> {
        self.instance.on_batch(&self.packed)
    }
}

impl RecordFilter for RecordHook {
    fn ready(&mut self) -> bool {
        self.reload_ready()
    }

    fn filter(&mut self, batch: &mut Batch) -> Result<(), HookError> {
        if batch.records.is_empty() {
            return Ok(());
        }
        self.pack(batch);
        let verdict = self.call();
        self.unpack(batch);
        let verdict = verdict?;
        if verdict.drop.is_empty() && verdict.edits.is_empty() {
            return Ok(()); // "no change": the batch goes on untouched
        }
        let plugin = self.instance.name().to_string();
        let bad = |what: String| HookError { plugin: plugin.clone(), hook: "records.on-batch", cause: what };
        let len = batch.records.len();
        for e in verdict.edits {
            if e.position as usize >= len {
                return Err(bad(format!("edit names record {} of {len}", e.position)));
            }
            batch.edits.push(RecordEdit {
                position: e.position,
                key: e.key,
                value: e.value,
                headers: e.headers,
                timestamp: e.timestamp,
                topic: e.topic,
            });
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
