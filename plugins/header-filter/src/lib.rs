//! An example user policy: drops every record that carries a given header, and masks one
//! field of JSON values. It implements only the record hook, so strait keeps its built-in
//! naming for the flow.
//!
//! Its keys, given in `mm2.properties` next to `replication.policy.wasm`:
//! - `replication.policy.header-filter.drop.header` (default `x-strait-drop`): records with this header are dropped;
//! - `replication.policy.header-filter.mask.field` (default none): the string value of this top-level JSON field is
//!   replaced by `"***"`.

use std::sync::OnceLock;

wit_bindgen::generate!({ path: "../../wit", world: "policy" });

use exports::strait::policy::{lifecycle, records};
use strait::policy::types::{Batch, Edit, HookSet, Property, Verdict};

pub mod packed;

struct Settings {
    drop_header: String,
    mask_field: Option<String>,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// Decides the verdict for a batch; plain Rust so it is tested on the host.
pub fn decide(
    batch: &packed::View<'_>,
    drop_header: &str,
    mask_field: Option<&str>,
) -> (Vec<u32>, Vec<(u32, Vec<u8>)>) {
    let mut drop = Vec::new();
    let mut masked = Vec::new();
    for i in 0..batch.len() {
        if batch.headers(i).any(|(k, _)| k == drop_header.as_bytes()) {
            drop.push(i as u32);
            continue;
        }
        if let (Some(field), Some(value)) = (mask_field, batch.value(i)) {
            if let Some(new) = mask_json_string_field(value, field) {
                masked.push((i as u32, new));
            }
        }
    }
    (drop, masked)
}

/// Replaces the string value of top-level-looking `"field": "..."` with `"***"`; `None` when the
/// field is absent (so the record is forwarded untouched).
pub fn mask_json_string_field(json: &[u8], field: &str) -> Option<Vec<u8>> {
    let needle = format!("\"{field}\"");
    let start = find(json, needle.as_bytes())? + needle.len();
    let mut i = start;
    while json.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
        i += 1;
    }
    if json.get(i) != Some(&b':') {
        return None;
    }
    i += 1;
    while json.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
        i += 1;
    }
    if json.get(i) != Some(&b'"') {
        return None;
    }
    let value_start = i;
    i += 1;
    while i < json.len() {
        match json[i] {
            b'\\' => i += 2,
            b'"' => break,
            _ => i += 1,
        }
    }
    let value_end = (i + 1).min(json.len());
    let mut out = Vec::with_capacity(json.len());
    out.extend_from_slice(&json[..value_start]);
    out.extend_from_slice(b"\"***\"");
    out.extend_from_slice(&json[value_end..]);
    Some(out)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

struct HeaderFilter;

impl lifecycle::Guest for HeaderFilter {
    fn init(_source: String, _target: String, properties: Vec<Property>) -> Result<(), String> {
        let get = |k: &str| properties.iter().find(|p| p.key == k).map(|p| p.value.clone());
        let drop_header = get("replication.policy.header-filter.drop.header").unwrap_or_else(|| "x-strait-drop".into());
        if drop_header.is_empty() {
            return Err("replication.policy.header-filter.drop.header must not be empty".into());
        }
        let _ = SETTINGS.set(Settings {
            drop_header,
            mask_field: get("replication.policy.header-filter.mask.field").filter(|f| !f.is_empty()),
        });
        Ok(())
    }

    fn hooks() -> HookSet {
        HookSet::RECORDS
    }
}

impl records::Guest for HeaderFilter {
    fn on_batch(records: Batch) -> Result<Verdict, String> {
        let settings = SETTINGS.get().ok_or("init was not called")?;
        let view = packed::View::new(&records.index, &records.data);
        let (drop, masked) = decide(&view, &settings.drop_header, settings.mask_field.as_deref());
        let edits = masked
            .into_iter()
            .map(|(position, value)| Edit {
                position,
                key: None,
                value: Some(Some(value)),
                headers: None,
                timestamp: None,
                topic: None,
            })
            .collect();
        Ok(Verdict { drop, edits })
    }
}

// Hooks not listed by `hooks()`: strait never calls them.
strait_policy_neutral::neutral_naming!(HeaderFilter);
strait_policy_neutral::neutral_filters!(HeaderFilter);
strait_policy_neutral::neutral_conflicts!(HeaderFilter);

// Exported only in the component: on the host the crate is built for its unit tests.
#[cfg(target_arch = "wasm32")]
export!(HeaderFilter);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_the_field_and_leaves_others() {
        let out = mask_json_string_field(br#"{"id":7, "card" : "4111 \"x\" 1111","amount":3}"#, "card").unwrap();
        assert_eq!(out, br#"{"id":7, "card" : "***","amount":3}"#);
        assert_eq!(mask_json_string_field(br#"{"id":7}"#, "card"), None);
        assert_eq!(mask_json_string_field(br#"{"card":12}"#, "card"), None);
    }

    #[test]
    fn drops_records_with_the_header_and_masks_the_rest() {
        let mut b = packed::Builder::default();
        b.push(Some(b"k1"), Some(br#"{"card":"1234"}"#), &[(b"x-strait-drop", Some(b""))]);
        b.push(None, Some(br#"{"card":"5678","n":1}"#), &[(b"other", None)]);
        b.push(Some(b"k3"), None, &[]);
        let view = packed::View::new(&b.index, &b.data);
        let (drop, masked) = decide(&view, "x-strait-drop", Some("card"));
        assert_eq!(drop, vec![0]);
        assert_eq!(masked, vec![(1, br#"{"card":"***","n":1}"#.to_vec())]);
    }
}
