//! The configuration reference (`docs/configuration.md`) and the parser agree: every key strait
//! acts on is documented there, and every key documented there is one strait acts on.

use std::collections::BTreeSet;

use super::client::{is_common_client_key, is_registry_key};
use super::flow::{FLOW_KEYS, PROCESS_KEYS};

/// The reference, as the repository holds it.
fn reference() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every key named in the first column of the reference's key tables, without its scope
/// (`A->B.`, `<alias>.`, `<alias>.consumer.`, ...); patterns (`ssl.*`, `<client key>`) and
/// values left out.
fn documented(text: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for line in text.lines().filter(|l| l.starts_with("| `")) {
        let first = line.split(" | ").next().unwrap_or_default();
        for key in first.split('`').skip(1).step_by(2) {
            let bare = ["A->B.", "<alias>.", "<source>.consumer.", "<target>.producer."]
                .iter()
                .fold(key, |k, scope| k.strip_prefix(scope).unwrap_or(k));
            // Keys are lower case; a token in capitals is a value named beside its key
            // (`sasl.jaas.config` with `PlainLoginModule`), one with a leading dot a suffix.
            let key_like = bare.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-_>".contains(c));
            if key_like && !bare.starts_with('.') {
                keys.insert(bare.to_string());
            }
        }
    }
    keys
}

/// Whether the parser acts on `key` in some scope.
fn parsed(key: &str) -> bool {
    FLOW_KEYS.contains(&key)
        || PROCESS_KEYS.contains(&key)
        || is_common_client_key(key)
        || is_registry_key(key)
        || key.starts_with("replication.policy.")
        // Client keys of one role, documented with their scope.
        || matches!(key, "auto.offset.reset" | "compression.type")
}

#[test]
fn every_key_strait_acts_on_is_in_the_reference_and_every_key_there_is_parsed() {
    let keys = documented(&reference());
    assert!(keys.len() > 50, "the reference's tables were not found: {keys:?}");
    let undocumented: Vec<&str> =
        FLOW_KEYS.iter().chain(PROCESS_KEYS).copied().filter(|k| !keys.contains(*k)).collect();
    assert!(undocumented.is_empty(), "parsed but not in docs/configuration.md: {undocumented:?}");
    let unparsed: Vec<&String> = keys.iter().filter(|k| !parsed(k)).collect();
    assert!(unparsed.is_empty(), "in docs/configuration.md but not parsed: {unparsed:?}");
}

#[test]
fn the_reference_reader_finds_scoped_keys_and_skips_patterns() {
    let text =
        "| `A->B.enabled` | x |\n| `<alias>.consumer.*`, `<source>.consumer.auto.offset.reset` | y |\nnot | `a` |";
    let keys: Vec<String> = documented(text).into_iter().collect();
    assert_eq!(keys, vec!["auto.offset.reset".to_string(), "enabled".to_string()]);
}
