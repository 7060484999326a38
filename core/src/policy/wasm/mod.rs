//! The wasmtime host of policy components: bindings generated from `wit/policy.wit`, one
//! engine per process, each component compiled once and instantiated per worker thread.

mod engine;
mod error;
mod filters;
mod host;
mod instance;
mod naming;
mod records;
mod reload;

pub use engine::{PolicyComponent, PolicyEngine};
pub use error::PolicyError;
pub use filters::WasmFilters;
pub use instance::{ConflictVersion, PolicyInstance};
pub use naming::WasmNaming;
pub use records::{BatchHook, RecordVerdict};
pub(crate) use reload::modified;
pub use reload::request_reload;

/// Bindings generated from the WIT contract.
pub(crate) mod bindings {
    wasmtime::component::bindgen!({ path: "../wit", world: "policy" });
}
