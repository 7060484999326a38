//! A component built against `strait:policy@0.0.9`, which strait must refuse by version.

wit_bindgen::generate!({ path: "wit", world: "policy" });

struct Old;

impl exports::strait::policy::lifecycle::Guest for Old {
    fn init(_source: String, _target: String) -> Result<(), String> {
        Ok(())
    }
}

#[cfg(target_arch = "wasm32")]
export!(Old);
