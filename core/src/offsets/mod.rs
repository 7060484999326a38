//! Source positions: which records the target acknowledged, and where that is stored.

pub mod mm2;
mod progress;
mod runs;
pub mod store;
mod translate;
pub mod wire;

pub use progress::{Progress, SlotId};
pub use runs::{PartitionMap, Run, RunTracker};
pub use translate::{SyncRule, Translator};
