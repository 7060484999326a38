//! The record hook: a batch crosses into the component as one packed buffer (see
//! `types.batch` in the WIT), and only the records the verdict names are touched on the way back.

use std::sync::Arc;

use super::bindings::strait::policy::types::{Batch as WitBatch, Verdict};
use super::engine::PolicyEngine;
use super::error::PolicyError;
use super::instance::PolicyInstance;
use super::reload::ReloadWatch;
use crate::config::FlowConfig;
use crate::events::{PolicyReloadFailed, PolicyReloaded};
use crate::offsets::SlotId;
use crate::pipeline::{Batch, Header, RecordFilter, Slots};
use crate::policy::RouteGuard;

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
/// Length that marks null.
const NULL: u32 = u32::MAX;

/// Runs a component's record hook on every batch of a flow.
pub struct RecordHook {
    instance: PolicyInstance,
    slots: Slots,
    packed: WitBatch,
    reload: Option<Reload>,
    routes: Option<RouteGuard>,
}

impl RecordHook {
    /// Wraps an instance whose component implements `records`.
    pub fn new(instance: PolicyInstance, slots: Slots) -> Self {
        Self {
            instance,
            slots,
            packed: WitBatch { topics: Vec::new(), index: Vec::new(), timestamps: Vec::new(), data: Vec::new() },
            reload: None,
            routes: None,
        }
    }

    /// Refuses edits that route a record to an internal topic (see [`RouteGuard`]).
    pub fn guarding_routes(mut self, guard: RouteGuard) -> Self {
        self.routes = Some(guard);
        self
    }

    /// Reloads the component from `flow`'s `replication.policy.wasm` when the file changes or
    /// on SIGHUP, between two batches, so no record is lost or handled twice.
    pub fn reloading(mut self, flow: &FlowConfig) -> Self {
        if let Some(path) = &flow.policy_wasm {
            self.reload = Some(Reload {
                watch: ReloadWatch::new(path),
                flow: flow.clone(),
                loading: None,
            });
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
                        Err(PolicyError::Incompatible { plugin: path.display().to_string(), reason: "the new component has no record hook".into() })
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
                PolicyReloadFailed { flow: &flow_name, plugin: &plugin, error: &format!("no thread to compile it on: {e}") }.emit();
                true
            }
        }
    }

    /// Packs `batch` into the reusable buffers.
    pub fn pack(&mut self, batch: &Batch) {
        let p = &mut self.packed;
        p.topics.clear();
        p.index.clear();
        p.timestamps.clear();
        p.data.clear();
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
            let (ko, kl) = put(&mut p.data, r.key.as_deref());
            let (vo, vl) = put(&mut p.data, r.value.as_deref());
            let ho = p.data.len() as u32;
            pack_headers(&r.headers, &mut p.data);
            let hl = p.data.len() as u32 - ho;
            p.index.extend_from_slice(&[topic, ko, kl, vo, vl, ho, hl, 0]);
            p.timestamps.push(r.timestamp);
        }
    }

    /// Calls the hook on the packed batch.
    pub fn call(&mut self) -> Result<Verdict, PolicyError> {
        self.instance.on_batch(&self.packed)
    }
}

/// Appends `headers` to `data` in the packed layout of the WIT's `types.batch`.
pub(crate) fn pack_headers(headers: &[Header], data: &mut Vec<u8>) {
    for h in headers {
        data.extend_from_slice(&(h.key.len() as u32).to_le_bytes());
        data.extend_from_slice(h.key.as_bytes());
        match &h.value {
            Some(v) => {
                data.extend_from_slice(&(v.len() as u32).to_le_bytes());
                data.extend_from_slice(v);
            }
            None => data.extend_from_slice(&NULL.to_le_bytes()),
        }
    }
}

fn put(data: &mut Vec<u8>, bytes: Option<&[u8]>) -> (u32, u32) {
    let offset = data.len() as u32;
    match bytes {
        Some(b) => {
            data.extend_from_slice(b);
            (offset, b.len() as u32)
        }
        None => (offset, NULL),
    }
}

/// Decodes the packed header layout.
fn unpack_headers(mut bytes: &[u8]) -> Option<Vec<Header>> {
    let mut out = Vec::new();
    let take_u32 = |b: &mut &[u8]| -> Option<u32> {
        let (head, rest) = b.split_first_chunk::<4>()?;
        *b = rest;
        Some(u32::from_le_bytes(*head))
    };
    while !bytes.is_empty() {
        let klen = take_u32(&mut bytes)? as usize;
        let (key, rest) = bytes.split_at_checked(klen)?;
        bytes = rest;
        let vlen = take_u32(&mut bytes)?;
        let value = if vlen == NULL {
            None
        } else {
            let (v, rest) = bytes.split_at_checked(vlen as usize)?;
            bytes = rest;
            Some(v.to_vec())
        };
        out.push(Header { key: String::from_utf8_lossy(key).into_owned(), value });
    }
    Some(out)
}

impl RecordFilter for RecordHook {
    fn ready(&mut self) -> bool {
        self.reload_ready()
    }

    fn filter(&mut self, batch: &mut Batch) -> Result<(), PolicyError> {
        if batch.records.is_empty() {
            return Ok(());
        }
        self.pack(batch);
        let verdict = self.call()?;
        if verdict.drop.is_empty() && verdict.edits.is_empty() {
            return Ok(()); // "no change": the batch goes on untouched
        }
        let plugin = self.instance.name().to_string();
        let bad = |what: String| PolicyError::Hook { plugin: plugin.clone(), hook: "records.on-batch", cause: what };
        let len = batch.records.len();
        for e in verdict.edits {
            let record = batch.records.get_mut(e.position as usize).ok_or_else(|| bad(format!("edit names record {} of {len}", e.position)))?;
            if let Some(key) = e.key {
                record.key = key;
            }
            if let Some(value) = e.value {
                record.value = value;
            }
            if let Some(headers) = e.headers {
                record.headers = unpack_headers(&headers).ok_or_else(|| bad("edit has malformed packed headers".into()))?;
            }
            if let Some(ts) = e.timestamp {
                record.timestamp = ts;
            }
            if let Some(topic) = e.topic {
                if let Some(guard) = self.routes.as_mut() {
                    if guard.is_internal(&topic)? {
                        return Err(bad(format!(
                            "edit routes record {} to `{topic}`, an internal topic (Kafka's, or a replicator's positions, offset syncs, checkpoints or heartbeats); \
                             route to an ordinary topic",
                            e.position
                        )));
                    }
                }
                record.route = Some(Arc::from(topic));
            }
        }
        if !verdict.drop.is_empty() {
            let mut keep = vec![true; len];
            for &i in &verdict.drop {
                *keep.get_mut(i as usize).ok_or_else(|| bad(format!("drop names record {i} of {len}")))? = false;
            }
            let mut flags = keep.into_iter();
            batch.records.retain(|_| flags.next().unwrap_or(true));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_headers_round_trip() {
        let mut data = Vec::new();
        for (k, v) in [("a", Some(&b"1"[..])), ("null", None), ("", Some(&b""[..]))] {
            data.extend_from_slice(&(k.len() as u32).to_le_bytes());
            data.extend_from_slice(k.as_bytes());
            match v {
                Some(v) => {
                    data.extend_from_slice(&(v.len() as u32).to_le_bytes());
                    data.extend_from_slice(v);
                }
                None => data.extend_from_slice(&NULL.to_le_bytes()),
            }
        }
        let h = unpack_headers(&data).unwrap();
        assert_eq!(h.len(), 3);
        assert_eq!(h[1], Header { key: "null".into(), value: None });
        assert_eq!(unpack_headers(&data[..data.len() - 1]), None);
    }
}
