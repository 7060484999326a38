//! Transform: rewrites records on their way, as the record hook's edits in the batch ask.
//! The filter stage decided which records go on; this stage changes what they carry and where
//! they land. Remote topic names are not decided here but once per partition in the slot
//! table, so they cost nothing per record.

use crate::policy::{PolicyError, RouteGuard};
use crate::record::{check_headers, Batch, HookError, RecordTransform};

/// Applies the edits a record hook put in the batch: new keys, values, headers, timestamps,
/// and routes to other target topics, which must not be internal ones.
pub struct ApplyEdits {
    plugin: String,
    routes: RouteGuard,
}

impl ApplyEdits {
    /// Edits from `plugin`'s record hook, routes checked by `routes`.
    pub fn new(plugin: &str, routes: RouteGuard) -> Self {
        Self { plugin: plugin.to_string(), routes }
    }

    fn refused(&self, cause: String) -> HookError {
        HookError { plugin: format!("policy {}", self.plugin), hook: "records.on-batch", cause }
    }

    /// Whether a route goes to an internal topic, as the naming policy answers it.
    fn is_internal(&mut self, topic: &str) -> Result<bool, HookError> {
        self.routes.is_internal(topic).map_err(|e| match e {
            PolicyError::Hook(failed) => failed,
            // A loaded naming component fails only in a hook; were it otherwise, the flow still
            // stops before the batch.
            other => self.refused(other.to_string()),
        })
    }
}

impl RecordTransform for ApplyEdits {
    fn transform(&mut self, batch: &mut Batch) -> Result<(), HookError> {
        for e in std::mem::take(&mut batch.edits) {
            let i = e.position as usize;
            if i >= batch.records.len() {
                return Err(self.refused(format!("edit names record {i} of {}", batch.records.len())));
            }
            if let Some(headers) = &e.headers {
                check_headers(headers).map_err(|what| self.refused(format!("edit of record {i} has {what}")))?;
            }
            if let Some(topic) = &e.topic {
                if self.is_internal(topic)? {
                    return Err(self.refused(format!(
                        "edit routes record {i} to `{topic}`, an internal topic (Kafka's, or a replicator's positions, offset syncs, \
                         checkpoints or heartbeats); route to an ordinary topic"
                    )));
                }
            }
            batch.apply(e);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests_support::default_naming;
    use crate::record::{RecordEdit, SourceOffset};

    fn apply() -> ApplyEdits {
        let guard = RouteGuard::new(default_naming(), ["strait-offsets.us-east.internal".to_string()]).expect("guard");
        ApplyEdits::new("test.wasm", guard)
    }

    fn batch() -> Batch {
        let mut b = Batch::with_capacity(2, 64);
        b.push(0, SourceOffset(0), 1_000, Some(b"k0"), Some(b"v0"), []);
        b.push(0, SourceOffset(1), 1_001, Some(b"k1"), Some(b"v1"), []);
        b
    }

    #[test]
    fn edits_rewrite_only_the_records_and_fields_they_name() {
        let mut b = batch();
        b.edits = vec![RecordEdit {
            position: 1,
            key: Some(None),
            value: Some(Some(b"masked".to_vec())),
            timestamp: Some(7),
            topic: Some("audit".into()),
            ..RecordEdit::default()
        }];
        apply().transform(&mut b).expect("applied");
        let (first, second) = (&b.records[0], &b.records[1]);
        assert_eq!((b.key(first), b.value(first), first.timestamp), (Some(&b"k0"[..]), Some(&b"v0"[..]), 1_000));
        assert_eq!((b.key(second), b.value(second), second.timestamp), (None, Some(&b"masked"[..]), 7));
        assert_eq!(second.route.as_deref(), Some("audit"));
        assert!(b.edits.is_empty(), "applied edits leave the batch");
    }

    #[test]
    fn a_route_to_an_internal_topic_or_an_edit_past_the_batch_stops_the_batch() {
        for edit in [
            RecordEdit { position: 0, topic: Some("__consumer_offsets".into()), ..RecordEdit::default() },
            RecordEdit { position: 2, timestamp: Some(1), ..RecordEdit::default() },
        ] {
            let mut b = batch();
            b.edits = vec![edit.clone()];
            let err = apply().transform(&mut b).expect_err("refused").to_string();
            assert!(err.contains("test.wasm"), "{err}");
            assert!(b.records.iter().all(|r| r.route.is_none()), "{edit:?}");
        }
    }
}
