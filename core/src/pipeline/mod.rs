//! The data path of one flow: fetch → filter → transform → produce, joined by bounded channels
//! of batches. The stages of every flow share one pool of threads; [`pool`] says how flows map
//! to threads.

mod doorbell;
mod fetch;
mod lag;
pub mod pool;
mod produce;
mod record_hook;
mod slots;
mod stage;
mod transform;

pub use doorbell::Doorbell;
pub use fetch::{AssignmentChange, FetchStage, FetchTask, NewPartition, PendingAssignments};
pub use pool::{FlowControl, FlowEnded, Periodic, Pool, StageTask, Step};
pub use produce::{
    transactional_id, Deliveries, DeliveryContext, InFlight, Lanes, OffsetSyncSink, PositionWriter, ProduceStage,
    ProduceTask, Sent, TargetProducer, Ticket, POSITION_TICKET,
};
pub use record_hook::RecordHook;
pub use slots::{Slot, Slots};
pub use stage::{MiddleStage, Neighbours};
pub use transform::ApplyEdits;

// The record level, as the pipeline handed it on before it stood apart; new code imports
// `crate::record`.
pub use crate::record::{
    check_headers, pack_header, pack_header_parts, Batch, Headers, KeepAll, Record, RecordEdit, RecordFilter,
    RecordTransform, Span, Unchanged,
};

use crate::cluster::{AdminError, ClusterError};
use crate::record::{HookError, SourceOffset};

/// Why a stage, or a periodic part, stopped its flow. The supervisor sees it wrapped in
/// [`crate::flows::FlowError`], with what can fail while a flow is assembled.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// A cluster could not be used.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A topic could not be prepared on the target.
    #[error(transparent)]
    Admin(#[from] AdminError),
    /// A policy component failed to load, refused the flow, or failed in a hook.
    #[error(transparent)]
    Policy(#[from] crate::policy::PolicyError),
    /// The target refused a record for good. Its position was not passed, so a restart after
    /// the fix resumes at this record.
    #[error("flow {flow}: the target refused {topic}-{partition} offset {offset}: {reason}; {hint}")]
    Rejected {
        /// `source->target`.
        flow: String,
        /// Source topic.
        topic: String,
        /// Source partition.
        partition: i32,
        /// Source offset.
        offset: SourceOffset,
        /// What the target or client said.
        reason: String,
        /// What to do about it.
        hint: String,
    },
    /// A setting of the flow has a value strait cannot use.
    #[error("flow {flow}: `{key}` {reason}")]
    Config {
        /// `source->target`.
        flow: String,
        /// The key as written in mm2.properties.
        key: String,
        /// What is wrong and what would do.
        reason: String,
    },
    /// An exactly-once flow's transaction could not go on: fenced by a newer owner of its
    /// task, timed out, or refused. Nothing of it is visible to `read_committed` readers; a
    /// restart resumes at the last commit.
    #[error("flow {flow}: {what}; the flow restarts from its last committed transaction")]
    Transaction {
        /// `source->target`.
        flow: String,
        /// What happened.
        what: String,
    },
    /// A stage thread could not start or panicked.
    #[error("flow {flow}: the {stage} thread {what}")]
    Thread {
        /// `source->target`.
        flow: String,
        /// Which stage.
        stage: &'static str,
        /// What happened.
        what: String,
    },
}

impl From<HookError> for StageError {
    fn from(e: HookError) -> Self {
        StageError::Policy(e.into())
    }
}

impl StageError {
    /// Whether restarting the flow may cure this: an unreachable cluster or a broker error may
    /// pass; a refused record, a broken plugin or a bad setting stays until the operator acts.
    /// A panic restarts too: it is a bug, and the backoff keeps a repeating one cheap.
    pub fn is_transient(&self) -> bool {
        match self {
            // librdkafka checks settings as the client is made: the same config is refused again.
            StageError::Cluster(ClusterError::BadSetting { .. }) => false,
            StageError::Cluster(_)
            | StageError::Admin(_)
            | StageError::Thread { .. }
            | StageError::Transaction { .. } => true,
            StageError::Policy(_) | StageError::Rejected { .. } | StageError::Config { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_setting_librdkafka_refuses_parks_the_flow_and_an_unreachable_cluster_does_not() {
        let refused = StageError::Cluster(ClusterError::BadSetting {
            alias: "us-east".into(),
            role: "consumer",
            key: "no.such.setting".into(),
            line: 7,
            reason: "No such configuration property".into(),
        });
        assert!(!refused.is_transient(), "the same setting is refused at every restart: {refused}");
        let unreachable = StageError::Cluster(ClusterError::Unreachable {
            alias: "us-east".into(),
            bootstrap: "127.0.0.1:1".into(),
            line: 2,
            timeout: Duration::from_secs(15),
            reason: "timed out".into(),
        });
        assert!(unreachable.is_transient(), "brokers come back: {unreachable}");
    }
}
