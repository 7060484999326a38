//! Why a flow stopped, as the supervisor sees it: what a stage or periodic part said
//! ([`StageError`]), or what failed while the flow was assembled.

use crate::cluster::{AdminError, ClusterError};
use crate::pipeline::StageError;
use crate::policy::PolicyError;
use crate::topics::{DiscoveryError, SyncError};

/// Why a flow stopped.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    /// A stage or periodic part of the running flow stopped it, or one could not be built.
    #[error(transparent)]
    Stage(#[from] StageError),
    /// Topic discovery failed at start-up.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// A schema registry client could not be set up (its TLS settings).
    #[error(transparent)]
    Schemas(#[from] crate::schemas::RegistryError),
}

impl FlowError {
    /// Whether restarting the flow may cure this (see [`StageError::is_transient`]); discovery
    /// refused by the policy stays until the operator acts, like any policy failure.
    pub fn is_transient(&self) -> bool {
        match self {
            FlowError::Stage(e) => e.is_transient(),
            FlowError::Discovery(e) => {
                !matches!(e, DiscoveryError::Policy(_) | DiscoveryError::Sync(SyncError::Policy(_)))
            }
            FlowError::Schemas(e) => e.is_transient(),
        }
    }
}

impl From<ClusterError> for FlowError {
    fn from(e: ClusterError) -> Self {
        FlowError::Stage(e.into())
    }
}

impl From<AdminError> for FlowError {
    fn from(e: AdminError) -> Self {
        FlowError::Stage(e.into())
    }
}

impl From<PolicyError> for FlowError {
    fn from(e: PolicyError) -> Self {
        FlowError::Stage(e.into())
    }
}
