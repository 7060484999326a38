//! The built-in policy components, compiled from `plugins/` by `core/build.rs` and embedded.

/// MM2's `DefaultReplicationPolicy` (`plugins/default`).
pub const DEFAULT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/strait_policy_default.wasm"));
/// MM2's `IdentityReplicationPolicy` (`plugins/identity`).
pub const IDENTITY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/strait_policy_identity.wasm"));
