//! What can go wrong with a policy component, each naming the plugin, the hook and the cause.

use crate::record::HookError;

/// A policy component could not be loaded, refused its configuration, or failed in a hook.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("policy {plugin}: cannot read it: {source}; check `replication.policy.wasm`")]
    Read {
        /// The plugin's file.
        plugin: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The bytes are not a WebAssembly component.
    #[error("policy {plugin}: not a WebAssembly component ({reason}); build it with `cargo build --target wasm32-wasip2` (see plugins/README.md)")]
    NotAComponent {
        /// The plugin.
        plugin: String,
        /// What wasmtime said.
        reason: String,
    },
    /// The component does not implement this strait's WIT contract.
    #[error("policy {plugin}: does not implement strait:policy@0.1.0: {reason}; rebuild it against wit/policy.wit of this strait")]
    Incompatible {
        /// The plugin.
        plugin: String,
        /// What is missing or different.
        reason: String,
    },
    /// `init` returned an error message.
    #[error("policy {plugin}: refused the flow's configuration: {message}")]
    Refused {
        /// The plugin.
        plugin: String,
        /// The plugin's message.
        message: String,
    },
    /// A hook trapped, ran out of time or memory, or returned an error.
    #[error(transparent)]
    Hook(#[from] HookError),
}

impl PolicyError {
    /// Whether a `filters.*` hook failed: the name it was asked about waits for a later round,
    /// and the flow goes on.
    pub fn is_filter(&self) -> bool {
        matches!(self, PolicyError::Hook(failed) if failed.hook.starts_with("filters."))
    }
}
