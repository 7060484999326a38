//! A policy that misbehaves on purpose, so strait's tests can show each failure is contained.
//! `replication.policy.misbehave.mode` picks how: `refuse` (init says no), `trap` (panics in the
//! record hook), `loop` (never returns), `alloc` (tries to take 4 GiB), `error` (returns an
//! error), `route:<topic>` (routes every record to `<topic>`), anything else behaves.

use std::sync::OnceLock;

wit_bindgen::generate!({ path: "../../wit", world: "policy" });

use exports::strait::policy::{lifecycle, records};
use strait::policy::types::{Batch, Edit, HookSet, Property, Verdict};

static MODE: OnceLock<String> = OnceLock::new();

struct Misbehave;

impl lifecycle::Guest for Misbehave {
    fn init(_source: String, _target: String, properties: Vec<Property>) -> Result<(), String> {
        let mode = properties
            .iter()
            .find(|p| p.key == "replication.policy.misbehave.mode")
            .map_or(String::new(), |p| p.value.clone());
        if mode == "refuse" {
            return Err("this flow is refused on purpose".into());
        }
        let _ = MODE.set(mode);
        Ok(())
    }

    fn hooks() -> HookSet {
        HookSet::RECORDS
    }
}

impl records::Guest for Misbehave {
    fn on_batch(records: Batch) -> Result<Verdict, String> {
        match MODE.get().map(String::as_str) {
            Some("trap") => panic!("misbehave: trap on purpose"),
            Some("loop") => {
                let mut n = 0u64;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            Some("alloc") => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                for _ in 0..64 {
                    hoard.push(vec![1u8; 64 << 20]);
                }
                std::hint::black_box(&hoard);
                Ok(Verdict { drop: Vec::new(), edits: Vec::new() })
            }
            Some("error") => Err(format!("refusing a batch of {} records", records.timestamps.len())),
            Some(mode) if mode.starts_with("route:") => {
                let topic = mode["route:".len()..].to_string();
                let edits = (0..records.timestamps.len() as u32)
                    .map(|position| Edit {
                        position,
                        key: None,
                        value: None,
                        headers: None,
                        timestamp: None,
                        topic: Some(topic.clone()),
                    })
                    .collect();
                Ok(Verdict { drop: Vec::new(), edits })
            }
            _ => Ok(Verdict { drop: Vec::new(), edits: Vec::new() }),
        }
    }
}

// Hooks not listed by `hooks()`: strait never calls them.
strait_policy_neutral::neutral_naming!(Misbehave);
strait_policy_neutral::neutral_filters!(Misbehave);
strait_policy_neutral::neutral_conflicts!(Misbehave);

// Exported only in the component: on the host the crate is built for its unit tests.
#[cfg(target_arch = "wasm32")]
export!(Misbehave);
