//! The record hook: a batch crosses into the component as one packed buffer (see
//! `types.batch` in the WIT), and comes back as a verdict on the records it names. Applying the
//! verdict to the batch is the filter stage's part.

use super::bindings::strait::policy::types::{Batch as WitBatch, Verdict};
use super::engine::PolicyEngine;
use super::error::PolicyError;
use super::instance::PolicyInstance;
use super::reload::ReloadWatch;
use crate::config::FlowConfig;
use crate::events::{PolicyReloadFailed, PolicyReloaded};
use crate::record::{Batch, HookError, RecordEdit, SlotId, NULL};

/// What a record hook answered for one batch, by the positions of the records it was given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordVerdict {
    /// Records that do not go to the target.
    pub drop: Vec<u32>,
    /// Rewrites of records that do.
    pub edits: Vec<RecordEdit>,
}

impl From<Verdict> for RecordVerdict {
    fn from(v: Verdict) -> Self {
        let edits = v
            .edits
            .into_iter()
            .map(|e| RecordEdit {
                position: e.position,
                key: e.key,
                value: e.value,
                headers: e.headers,
                timestamp: e.timestamp,
                topic: e.topic,
            })
            .collect();
        Self { drop: v.drop, edits }
    }
}

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

/// A component's `records.on-batch` hook, asked once per batch, with buffers reused from one
/// batch to the next.
pub struct BatchHook {
    instance: PolicyInstance,
    packed: WitBatch,
    reload: Option<Reload>,
}

impl BatchHook {
    /// Wraps an instance whose component implements `records`.
    pub fn new(instance: PolicyInstance) -> Self {
        Self {
            instance,
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
    pub fn ready(&mut self) -> bool {
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

    /// The plugin's name.
    pub fn name(&self) -> &str {
        self.instance.name()
    }

    /// Packs `batch` into the reusable buffers: the index of every record's parts, with the
    /// topic `source_topic` names for each record's slot, and the batch's own buffer, lent to
    /// the hook until [`Self::unpack`] gives it back.
    pub fn pack(&mut self, batch: &mut Batch, source_topic: impl Fn(SlotId) -> String) {
        let p = &mut self.packed;
        p.topics.clear();
        p.index.clear();
        p.timestamps.clear();
        p.index.reserve(batch.records.len() * STRIDE);
        p.timestamps.reserve(batch.records.len());
        let mut topic_of: Vec<(SlotId, u32)> = Vec::new();
        for r in &batch.records {
            let topic = match topic_of.iter().find(|(s, _)| *s == r.slot) {
                Some(&(_, t)) => t,
                None => {
                    let name = source_topic(r.slot);
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
    pub fn call(&mut self) -> Result<RecordVerdict, HookError> {
        self.instance.on_batch(&self.packed).map(RecordVerdict::from)
    }
}
