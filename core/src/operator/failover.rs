//! `strait failover`: what moving a group to the target would cost (the RPO) and where it
//! would resume, and with `--apply` committing those positions for the group there.

use super::lag::{partition_lags, PartitionLag};
use super::{translate_group, FlowView, TranslatedOffset};
use crate::checkpoints::{sync_group, SyncOutcome};
use crate::flows::FlowError;
use crate::offsets::mm2::Checkpoint;

/// The plan for one group.
#[derive(Debug, Clone)]
pub struct FailoverPlan {
    /// The group.
    pub group: String,
    /// Per partition: where it resumes on the target.
    pub positions: Vec<TranslatedOffset>,
    /// Per source partition: what is not replicated yet; empty when the source is down.
    pub lags: Vec<PartitionLag>,
    /// Whether the source answered (if not, positions come from the latest checkpoints and the
    /// RPO cannot be measured).
    pub source_reachable: bool,
}

/// Computes the failover plan of `group`.
pub fn plan_failover(view: &FlowView, group: &str) -> Result<FailoverPlan, FlowError> {
    let positions = translate_group(view, group)?;
    let lags = if view.source_reachable { partition_lags(view)? } else { Vec::new() };
    Ok(FailoverPlan { group: group.to_string(), positions, lags, source_reachable: view.source_reachable })
}

/// Commits the plan's positions for the group on the target, if the group has no members
/// there; a position the group already passed there is left alone.
pub fn apply_failover(view: &FlowView, plan: &FailoverPlan) -> Result<SyncOutcome, FlowError> {
    let checkpoints: Vec<Checkpoint> = plan
        .positions
        .iter()
        .filter_map(|p| {
            Some(Checkpoint {
                group: plan.group.clone(),
                topic: p.watched.target_topic.clone(),
                partition: p.watched.partition,
                upstream: p.committed?.get(),
                downstream: p.translated?.get(),
                metadata: String::new(),
            })
        })
        .collect();
    Ok(sync_group(&view.target_groups, &plan.group, &checkpoints)?)
}
