//! Source positions: which records the target acknowledged, and where that is stored.

mod progress;
pub mod store;
pub mod wire;

pub use progress::{Progress, SlotId};
