//! How work on records fails: every step that can refuse a batch is a policy hook, or applies
//! what one answered, so the failure names the plugin and the hook.

/// A hook trapped, ran out of time or memory, returned an error, or answered something that
/// cannot be applied to the batch. The flow stops before the batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{plugin}: `{hook}` failed: {cause}")]
pub struct HookError {
    /// Who refused: `policy <component file>`, or `schema sync`.
    pub plugin: String,
    /// The WIT function, or the setting whose rule refused.
    pub hook: &'static str,
    /// Why.
    pub cause: String,
}
