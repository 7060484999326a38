//! Key ownership for active-active flows on shared topic names: every key has a home region,
//! and only writes made in a key's home region are replicated. Writes to a key elsewhere stay
//! where they were made; strait drops them on the way out and counts them, or routes them to a
//! dead-letter topic on the target when `conflicts.dead.letter.topic` is set.
//!
//! A consumer computes the same view from any cluster: per key, the last record (in log
//! order) whose origin is the key's owner.
//!
//! Keys, given next to `replication.policy.wasm`:
//! - `replication.policy.key-ownership.prefixes`: `prefix=alias` pairs separated by commas,
//!   e.g. `eu-=eu-west, us-=us-east`; the longest matching prefix decides;
//! - `replication.policy.key-ownership.hash`: aliases separated by commas; a key no prefix
//!   matches belongs to `aliases[fnv1a32(key) % aliases.len()]`.
//!
//! At least one of them is required; a key that neither decides belongs to nobody and is not
//! replicated.

use std::sync::OnceLock;

wit_bindgen::generate!({ path: "../../wit", world: "policy" });

use exports::strait::policy::{conflicts, lifecycle};
use strait::policy::types::{HookSet, Incoming, KeyState, Property};

/// Where keys live.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Ownership {
    /// `(prefix, alias)`, longest prefix first.
    pub prefixes: Vec<(Vec<u8>, String)>,
    /// Aliases a hash picks from.
    pub hash: Vec<String>,
}

const PREFIXES: &str = "replication.policy.key-ownership.prefixes";
const HASH: &str = "replication.policy.key-ownership.hash";

impl Ownership {
    /// Reads the plugin's keys; an error names the key and what is wrong with it.
    pub fn parse(properties: &[(&str, &str)]) -> Result<Self, String> {
        let get = |key: &str| properties.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        let mut o = Ownership::default();
        for pair in get(PREFIXES).unwrap_or("").split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (prefix, alias) =
                pair.split_once('=').ok_or_else(|| format!("{PREFIXES}: `{pair}` is not `prefix=alias`"))?;
            if alias.trim().is_empty() {
                return Err(format!("{PREFIXES}: `{pair}` names no cluster alias"));
            }
            o.prefixes.push((prefix.trim().as_bytes().to_vec(), alias.trim().to_string()));
        }
        o.prefixes.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        o.hash =
            get(HASH).unwrap_or("").split(',').map(str::trim).filter(|a| !a.is_empty()).map(String::from).collect();
        if o.prefixes.is_empty() && o.hash.is_empty() {
            return Err(format!("key ownership needs `{PREFIXES}` or `{HASH}` (e.g. `{HASH} = us-east, us-west`)"));
        }
        Ok(o)
    }

    /// The alias of the region that owns `key`, if any.
    pub fn owner(&self, key: &[u8]) -> Option<&str> {
        if let Some((_, alias)) = self.prefixes.iter().find(|(p, _)| key.starts_with(p)) {
            return Some(alias);
        }
        if self.hash.is_empty() {
            return None;
        }
        Some(&self.hash[fnv1a32(key) as usize % self.hash.len()])
    }
}

/// 32-bit FNV-1a: simple enough for a consumer in any language to compute the same owner.
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, &b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

static OWNERSHIP: OnceLock<Ownership> = OnceLock::new();

struct KeyOwnership;

impl lifecycle::Guest for KeyOwnership {
    fn init(_source: String, _target: String, properties: Vec<Property>) -> Result<(), String> {
        let pairs: Vec<(&str, &str)> = properties.iter().map(|p| (p.key.as_str(), p.value.as_str())).collect();
        let _ = OWNERSHIP.set(Ownership::parse(&pairs)?);
        Ok(())
    }

    fn hooks() -> HookSet {
        HookSet::CONFLICTS
    }
}

impl conflicts::Guest for KeyOwnership {
    fn resolve(arriving: Incoming, _known: Option<KeyState>) -> bool {
        OWNERSHIP.get().and_then(|o| o.owner(&arriving.key)) == Some(arriving.origin.as_str())
    }
}

strait_policy_neutral::neutral_naming!(KeyOwnership);
strait_policy_neutral::neutral_filters!(KeyOwnership);
strait_policy_neutral::neutral_records!(KeyOwnership);

#[cfg(target_arch = "wasm32")]
export!(KeyOwnership);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_prefix_decides_then_the_hash() {
        let o = Ownership::parse(&[(PREFIXES, "eu-=eu-west, eu-fr-=eu-south"), (HASH, "us-east, us-west")]).unwrap();
        assert_eq!(o.owner(b"eu-de-1"), Some("eu-west"));
        assert_eq!(o.owner(b"eu-fr-1"), Some("eu-south"));
        let other = o.owner(b"k-0001").unwrap();
        assert_eq!(other, ["us-east", "us-west"][fnv1a32(b"k-0001") as usize % 2]);
    }

    #[test]
    fn fnv1a_matches_the_published_vectors() {
        assert_eq!(fnv1a32(b""), 0x811c9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9cf968);
    }

    #[test]
    fn a_config_that_decides_nothing_is_refused_with_the_keys_to_set() {
        let err = Ownership::parse(&[]).unwrap_err();
        assert!(err.contains(HASH) && err.contains(PREFIXES), "{err}");
        assert!(Ownership::parse(&[(PREFIXES, "eu-")]).unwrap_err().contains("prefix=alias"));
        let o = Ownership::parse(&[(PREFIXES, "eu-=eu-west")]).unwrap();
        assert_eq!(o.owner(b"us-1"), None);
    }
}
