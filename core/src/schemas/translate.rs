//! The transform that carries schema ids across: each key and value in Confluent's wire format
//! gets the id its schema has on the target, once the schema worker has put the schema there.
//! A batch whose ids are not all resolved waits for the worker; records never leave with an id
//! the target registry does not know.

use std::collections::BTreeSet;
use std::sync::Arc;

use crossbeam_channel::Sender;

use super::ids::{IdTable, Resolved};
use super::wire::{rewrite_id, schema_id};
use crate::config::IdMode;
use crate::events::SchemaRecords;
use crate::record::{Batch, HookError, RecordTransform, Span};

/// Rewrites (or, in `keep` mode, checks) the schema ids of a flow's records.
pub struct SchemaIds {
    flow: String,
    source_alias: String,
    mode: IdMode,
    strict: bool,
    table: Arc<IdTable>,
    /// Ids for the worker to resolve.
    wanted: Sender<Vec<u32>>,
    /// What was asked and not yet answered, so a waiting batch asks once.
    asked: BTreeSet<u32>,
}

/// Per batch, how many keys and values went each way.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Carried an id the target registry knows (rewritten or kept).
    pub carried: u64,
    /// Not in the wire format: untouched.
    pub plain: u64,
    /// An id the source registry does not know: passed unchanged.
    pub unknown: u64,
    /// An id whose subjects the flow does not copy: passed unchanged.
    pub excluded: u64,
}

impl SchemaIds {
    /// The transform of `flow`, reading `table`, asking the worker through `wanted`.
    pub fn new(
        flow: &str,
        source_alias: &str,
        mode: IdMode,
        strict: bool,
        table: Arc<IdTable>,
        wanted: Sender<Vec<u32>>,
    ) -> Self {
        Self {
            flow: flow.to_string(),
            source_alias: source_alias.to_string(),
            mode,
            strict,
            table,
            wanted,
            asked: BTreeSet::new(),
        }
    }

    fn spans(batch: &Batch) -> impl Iterator<Item = Span> + '_ {
        batch.records.iter().flat_map(|r| [r.key, r.value]).flatten()
    }

    fn refused(&self, batch: &Batch, at: usize, id: u32, why: &str) -> HookError {
        let r = &batch.records[at];
        HookError {
            plugin: "schema sync".into(),
            hook: "schema.ids",
            cause: format!(
                "the record at source offset {} carries schema id {id}: {why}; nothing past it is replicated",
                r.offset.get()
            ),
        }
    }

    /// Rewrites or checks one key or value; what it was.
    fn carry(&self, batch: &mut Batch, at: usize, span: Span, counts: &mut Counts) -> Result<(), HookError> {
        let Some(id) = schema_id(batch.bytes(span)) else {
            counts.plain += 1;
            return Ok(());
        };
        match self.table.get(id) {
            Some(Resolved::On(target)) => {
                if self.mode == IdMode::Translate && target != id {
                    rewrite_id(batch.bytes_mut(span), target);
                }
                counts.carried += 1;
            }
            Some(Resolved::Unknown) if self.strict => {
                let why =
                    format!("the registry of `{}` does not know (schema.strict = true refuses it)", self.source_alias);
                return Err(self.refused(batch, at, id, &why));
            }
            Some(Resolved::Unknown) => counts.unknown += 1,
            Some(Resolved::Excluded) if self.strict => {
                let why = "it belongs to no subject this flow copies (schema.subjects, or a topic it does not replicate; schema.strict = true refuses it)";
                return Err(self.refused(batch, at, id, why));
            }
            Some(Resolved::Excluded) => counts.excluded += 1,
            Some(Resolved::Failed(why)) => return Err(self.refused(batch, at, id, &why)),
            // `ready` saw every id resolved; a table only grows.
            None => return Err(self.refused(batch, at, id, "it was not resolved before the batch went on")),
        }
        Ok(())
    }
}

impl RecordTransform for SchemaIds {
    fn ready(&mut self, batch: &Batch) -> bool {
        let unresolved = |s: Span| schema_id(batch.bytes(s)).filter(|id| !self.table.has(*id));
        // The usual batch carries only resolved ids: one pass, nothing allocated.
        if Self::spans(batch).all(|s| unresolved(s).is_none()) {
            self.asked.clear();
            return true;
        }
        let missing: BTreeSet<u32> = Self::spans(batch).filter_map(unresolved).collect();
        let new: Vec<u32> = missing.difference(&self.asked).copied().collect();
        if !new.is_empty() {
            // A worker gone means the flow is stopping: the batch never goes on.
            let _ = self.wanted.send(new);
            self.asked.extend(missing);
        }
        false
    }

    fn transform(&mut self, batch: &mut Batch) -> Result<(), HookError> {
        let mut counts = Counts::default();
        for at in 0..batch.records.len() {
            let r = &batch.records[at];
            for span in [r.key, r.value].into_iter().flatten() {
                self.carry(batch, at, span, &mut counts)?;
            }
        }
        let Counts { carried, plain, unknown, excluded } = counts;
        SchemaRecords { flow: &self.flow, carried, plain, unknown, excluded }.emit();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::SourceOffset;

    fn wire(id: u32, rest: &[u8]) -> Vec<u8> {
        let mut v = vec![0];
        v.extend_from_slice(&id.to_be_bytes());
        v.extend_from_slice(rest);
        v
    }

    fn batch(values: &[Vec<u8>]) -> Batch {
        let mut b = Batch::with_capacity(values.len(), 256);
        for (i, v) in values.iter().enumerate() {
            b.push(0, SourceOffset(i as i64), 0, Some(&wire(1, b"k")[..]), Some(&v[..]), []);
        }
        b
    }

    fn ids(mode: IdMode, strict: bool) -> (SchemaIds, Arc<IdTable>, crossbeam_channel::Receiver<Vec<u32>>) {
        let table = Arc::new(IdTable::default());
        let (tx, rx) = crossbeam_channel::unbounded();
        (SchemaIds::new("a->b", "a", mode, strict, table.clone(), tx), table, rx)
    }

    #[test]
    fn a_batch_waits_until_every_id_it_carries_is_resolved_and_asks_once() {
        let (mut t, table, asked) = ids(IdMode::Translate, false);
        let b = batch(&[wire(2, b"\x02\x00data"), b"plain".to_vec()]);
        assert!(!t.ready(&b));
        assert!(!t.ready(&b));
        assert_eq!(asked.try_iter().collect::<Vec<_>>(), vec![vec![1, 2]], "asked once for both");
        table.set(1, Resolved::On(101));
        assert!(!t.ready(&b), "2 still missing");
        table.set(2, Resolved::On(102));
        assert!(t.ready(&b));
    }

    #[test]
    fn translate_rewrites_ids_and_leaves_everything_else() {
        let (mut t, table, _asked) = ids(IdMode::Translate, false);
        table.set(1, Resolved::On(101));
        table.set(2, Resolved::On(102));
        let protobuf = wire(2, b"\x02\x00\x02message");
        let mut b = batch(&[protobuf.clone(), b"plain".to_vec()]);
        assert!(t.ready(&b));
        t.transform(&mut b).expect("carried");
        let (first, second) = (&b.records[0], &b.records[1]);
        assert_eq!(b.key(first), Some(&wire(101, b"k")[..]));
        assert_eq!(b.value(first), Some(&wire(102, b"\x02\x00\x02message")[..]), "message indexes and data kept");
        assert_eq!(b.value(second), Some(&b"plain"[..]));
    }

    #[test]
    fn keep_never_rewrites() {
        let (mut t, table, _asked) = ids(IdMode::Keep, false);
        table.set(1, Resolved::On(1));
        let mut b = batch(&[wire(1, b"v")]);
        t.transform(&mut b).expect("carried");
        assert_eq!(b.value(&b.records[0]), Some(&wire(1, b"v")[..]));
    }

    #[test]
    fn unknown_ids_pass_unchanged_or_stop_the_flow_when_strict() {
        for strict in [false, true] {
            let (mut t, table, _asked) = ids(IdMode::Translate, strict);
            table.set(1, Resolved::On(101));
            table.set(9, Resolved::Unknown);
            let mut b = batch(&[wire(9, b"v")]);
            let result = t.transform(&mut b);
            if strict {
                let err = result.expect_err("refused").to_string();
                assert!(err.contains("schema id 9") && err.contains("schema.strict") && err.contains("`a`"), "{err}");
            } else {
                result.expect("passed");
                assert_eq!(b.value(&b.records[0]), Some(&wire(9, b"v")[..]), "never mangled");
            }
        }
        let (mut t, table, _asked) = ids(IdMode::Translate, false);
        table.set(1, Resolved::Failed("the target registry refused it".into()));
        let err = t.transform(&mut batch(&[b"x".to_vec()])).expect_err("failed").to_string();
        assert!(err.contains("refused it"), "{err}");
    }
}
