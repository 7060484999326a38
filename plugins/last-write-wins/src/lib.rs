//! Last-write-wins conflict resolution for active-active flows on shared topic names.
//!
//! A write wins over what strait knows of its key on the target when its timestamp is newer;
//! equal timestamps are broken by the origin cluster's alias (the greater alias wins), so every
//! cluster picks the same winner. A consumer computes the same view from any cluster: per key,
//! the record with the greatest `(timestamp, origin)`, the later one in the log on a tie.
//!
//! What it cannot promise: it trusts the producers' clocks (a region whose clock runs ahead
//! wins every conflict for as long as it is ahead), and a write that reaches the target after
//! strait looked at the key but before the replicated record is appended is not seen by the
//! check; the record is written anyway and consumers still resolve by the rule above.

wit_bindgen::generate!({ path: "../../wit", world: "policy" });

use exports::strait::policy::{conflicts, lifecycle};
use strait::policy::types::{HookSet, Incoming, KeyState, Property};

/// Whether a write stamped `(timestamp, origin)` is at least as new as `known`.
pub fn wins(timestamp: i64, origin: &str, known: Option<(i64, &str)>) -> bool {
    known.is_none_or(|(t, o)| (timestamp, origin) >= (t, o))
}

struct LastWriteWins;

impl lifecycle::Guest for LastWriteWins {
    fn init(_source: String, _target: String, _properties: Vec<Property>) -> Result<(), String> {
        Ok(())
    }

    fn hooks() -> HookSet {
        HookSet::CONFLICTS
    }
}

impl conflicts::Guest for LastWriteWins {
    fn resolve(arriving: Incoming, known: Option<KeyState>) -> bool {
        wins(arriving.timestamp, &arriving.origin, known.as_ref().map(|k| (k.timestamp, k.origin.as_str())))
    }
}

strait_policy_neutral::neutral_naming!(LastWriteWins);
strait_policy_neutral::neutral_filters!(LastWriteWins);
strait_policy_neutral::neutral_records!(LastWriteWins);

#[cfg(target_arch = "wasm32")]
export!(LastWriteWins);

#[cfg(test)]
mod tests {
    use super::wins;

    #[test]
    fn newer_wins_and_ties_go_to_the_greater_alias() {
        assert!(wins(5, "us-east", None));
        assert!(wins(6, "us-east", Some((5, "us-west"))));
        assert!(!wins(4, "us-west", Some((5, "us-east"))));
        assert!(wins(5, "us-west", Some((5, "us-east"))));
        assert!(!wins(5, "us-east", Some((5, "us-west"))));
        assert!(wins(5, "us-east", Some((5, "us-east"))), "the same write seen again is no conflict");
    }
}
