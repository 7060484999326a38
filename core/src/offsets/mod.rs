//! Source positions: which records the target acknowledged, and where that is stored.

mod ledger;
pub mod mm2;
mod progress;
mod runs;
mod settled;
pub mod store;
mod sync_rule;
pub mod wire;

pub use crate::record::{SourceOffset, TargetOffset};
pub use ledger::{Ledger, PositionWrite, Refusal};
pub use progress::Progress;
pub use runs::{PartitionMap, Run, RunTracker};
pub use settled::{Settled, TargetExtent};
pub use sync_rule::SyncRule;
