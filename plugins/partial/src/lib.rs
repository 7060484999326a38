//! A component that exports only `lifecycle`, which strait must refuse as incomplete.

wit_bindgen::generate!({ path: "wit", world: "policy" });

use strait::policy::types::{HookSet, Property};

struct Partial;

impl exports::strait::policy::lifecycle::Guest for Partial {
    fn init(_source: String, _target: String, _properties: Vec<Property>) -> Result<(), String> {
        Ok(())
    }
    fn hooks() -> HookSet {
        HookSet::RECORDS
    }
}

#[cfg(target_arch = "wasm32")]
export!(Partial);
