//! Active-active on shared topic names. Two things decide whether a record of such a flow is
//! delivered:
//!
//! - **provenance**: every replicated record carries the clusters it has been on (see
//!   [`provenance`]); a flow never delivers a record to a cluster in that list, so nothing
//!   circulates even when both directions keep the topic's name;
//! - **conflict resolution**: a policy component with the `conflicts` hook sees each keyed
//!   record with the newest version of its key strait knows on the target ([`KeyStates`]) and
//!   says whether it is written. Refused records are dropped and counted, or routed to
//!   `conflicts.dead.letter.topic`.
//!
//! Both run in the filter stage, before the user's record hook.

mod keys;
pub mod provenance;

pub use keys::{KeyStates, Table, Version};

use std::collections::HashMap;
use std::sync::Arc;

use crate::events::{ConflictsRefused, LoopsPrevented};
use crate::pipeline::{Slot, Slots};
use crate::policy::{ConflictVersion, PolicyInstance};
use crate::record::{Batch, HookError, RecordFilter};

/// Conflict resolution of one flow.
pub struct Conflicts {
    /// An instance of the component with the `conflicts` hook.
    pub instance: PolicyInstance,
    /// What is known of keys on every cluster, shared by all flows of the process.
    pub keys: Arc<KeyStates>,
    /// Where refused records go on the target, instead of being dropped.
    pub dead_letter: Option<Arc<str>>,
}

/// The filter of an active-active flow.
pub struct ActiveActive {
    flow: String,
    source: String,
    target: String,
    slots: Slots,
    provenance: bool,
    conflicts: Option<Conflicts>,
    /// Headers being rewritten, reused across records.
    scratch: Vec<u8>,
}

impl ActiveActive {
    /// A filter for the flow `source->target`; `provenance` turns on the header and the loop
    /// check, `conflicts` the resolution.
    pub fn new(source: &str, target: &str, slots: Slots, provenance: bool, conflicts: Option<Conflicts>) -> Self {
        Self {
            flow: format!("{source}->{target}"),
            source: source.into(),
            target: target.into(),
            slots,
            provenance,
            conflicts,
            scratch: Vec::new(),
        }
    }

    /// Notes every keyed record of the batch as a write on the source, and returns what the
    /// table knows of each key on the target. The table is locked once, never across a
    /// `resolve` call.
    fn known_versions(&self, slots: &[Slot], batch: &Batch, keys: &KeyStates) -> Vec<Option<Option<Version>>> {
        let mut known = vec![None; batch.records.len()];
        let mut table = keys.lock();
        for (i, record) in batch.records.iter().enumerate() {
            let (Some(slot), Some(key)) = (slots.get(record.slot as usize), batch.key(record)) else { continue };
            let origin = provenance::origin(provenance::of(batch.headers(record)), &self.source);
            // Every record read is a write on the source, even one about to be dropped.
            table.observe(&self.source, &slot.source_topic, key, record.timestamp, origin);
            known[i] = Some(table.known(&self.target, &slot.remote_topic, key).cloned());
        }
        known
    }

    /// Notes the writes the batch makes on the target, newest per key.
    fn note_writes(&self, slots: &[Slot], batch: &Batch, keys: &KeyStates, mut written: HashMap<Vec<u8>, Version>) {
        let mut table = keys.lock();
        for record in &batch.records {
            let (Some(slot), Some(key)) = (slots.get(record.slot as usize), batch.key(record)) else { continue };
            if let Some(v) = written.remove(key) {
                table.observe(&self.target, &slot.remote_topic, key, v.timestamp, &v.origin);
            }
        }
    }
}

impl RecordFilter for ActiveActive {
    fn filter(&mut self, batch: &mut Batch) -> Result<(), HookError> {
        let slots = self.slots.read();
        let keys = self.conflicts.as_ref().map(|c| c.keys.clone());
        let mut keep = vec![true; batch.records.len()];
        let (mut looped, mut dropped, mut dead_lettered) = (0, 0, 0);
        // The key table is shared with the flow in the other direction, which may run on another
        // thread: it is locked only to read and to note, never across a `resolve` call (up to
        // 1 s each), so one flow's hook cannot stall the other flow.
        let known = match &keys {
            Some(keys) => self.known_versions(&slots, batch, keys),
            None => vec![None; batch.records.len()],
        };
        // Writes this batch will make on the target, newest per key, seen by later records of
        // the batch as if the table had been noted in between.
        let mut written: HashMap<Vec<u8>, Version> = HashMap::new();
        for i in 0..batch.records.len() {
            let record = &batch.records[i];
            if slots.get(record.slot as usize).is_none() {
                continue;
            }
            let path = provenance::of(batch.headers(record));
            let origin = provenance::origin(path, &self.source).to_string();
            if self.provenance && path.is_some_and(|p| provenance::contains(p, &self.target)) {
                keep[i] = false;
                looped += 1;
                continue;
            }
            let mut route = None;
            if let (Some(c), Some(before), Some(key)) = (self.conflicts.as_mut(), known[i].as_ref(), batch.key(record))
            {
                let newest = match (before, written.get(key)) {
                    (Some(b), Some(w)) => {
                        Some(if (w.timestamp, &*w.origin) >= (b.timestamp, &*b.origin) { w } else { b })
                    }
                    (b, w) => b.as_ref().or(w),
                };
                let newest = newest.map(|v| ConflictVersion { timestamp: v.timestamp, origin: &v.origin });
                if c.instance.resolve(key, record.timestamp, &origin, batch.bytes(record.headers), newest)? {
                    let version = Version { timestamp: record.timestamp, origin: Arc::from(origin.as_str()) };
                    match written.get(key) {
                        Some(w) if (w.timestamp, &*w.origin) > (version.timestamp, &*version.origin) => {}
                        _ => {
                            written.insert(key.to_vec(), version);
                        }
                    }
                } else if let Some(topic) = &c.dead_letter {
                    route = Some(topic.clone());
                    dead_lettered += 1;
                } else {
                    keep[i] = false;
                    dropped += 1;
                    continue;
                }
            }
            if route.is_some() {
                batch.records[i].route = route;
            }
            if self.provenance {
                provenance::extend(batch, i, &self.source, &mut self.scratch);
            }
        }
        if let (Some(keys), false) = (&keys, written.is_empty()) {
            self.note_writes(&slots, batch, keys, written);
        }
        drop(slots);
        if looped > 0 {
            LoopsPrevented { flow: &self.flow, records: looped }.emit();
        }
        if dropped + dead_lettered > 0 {
            ConflictsRefused { flow: &self.flow, dropped, dead_lettered }.emit();
        }
        if keep.contains(&false) {
            batch.retain(&keep);
        }
        Ok(())
    }
}
