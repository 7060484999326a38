//! Flows as supervised units. Each enabled flow of a config is started, watched and, when it
//! fails, restarted or parked on its own; the others keep replicating.
//!
//! ```text
//!             build ok               stage error / panic (transient)
//!  starting ───────────► running ───────────────────────────► restarting ──(backoff)──► starting
//!     │                    │   └── refused record, bad plugin ──► parked ──(config or plugin changed)──► starting
//!     └── build failed ────┘ (same two ways)
//!  any state ──(SIGTERM, or removed by a reload)──► stopped
//! ```
//!
//! - **Transient** failures (an unreachable cluster, a broker error, a panic) restart the flow
//!   after a pause of 1 s doubling to 60 s, back to 1 s once it ran for a minute ([`backoff`]).
//! - **Permanent** ones (a record the target refuses, a policy component that fails, a bad
//!   setting) park it with its reason until its config or plugin file changes.
//! - The process ends with an error only when every flow is parked, or at the first failure
//!   with `--fail-fast`.
//! - A reload (SIGHUP, or the config file changing) starts added flows, stops removed ones with
//!   their positions stored, restarts changed ones, and leaves the others running untouched.
//! - Shutdown asks every flow to stop and returns within `strait.shutdown.timeout.ms`.

mod assemble;
pub mod backoff;
mod error;
mod supervisor;

pub use backoff::Backoff;
pub use error::FlowError;
pub use supervisor::{run, RunError, RunOptions, Signals};
