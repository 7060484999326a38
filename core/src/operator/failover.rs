//! `strait failover`: what moving a group — or every group of a flow — to the target would cost
//! (the RPO) and where each would resume, and with `--apply` committing those positions there.

use super::lag::{partition_lags, PartitionLag};
use super::{translate_group, translate_groups, FlowView, TranslatedOffset};
use crate::checkpoints::{sync_group, Groups, SyncOutcome};
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

impl FailoverPlan {
    /// Whether `lag` is of a source partition the group reads (through this flow's mapping).
    fn reads(&self, lag: &PartitionLag) -> bool {
        self.positions
            .iter()
            .any(|p| !p.watched.back && p.watched.source_topic == lag.topic && p.watched.partition == lag.partition)
    }

    /// Records of the group's partitions not replicated yet: what it would not find on the
    /// target if the source were lost now (`None` when the source is down).
    pub fn rpo_records(&self) -> Option<i64> {
        self.source_reachable.then(|| self.lags.iter().filter(|l| self.reads(l)).map(|l| l.unreplicated).sum())
    }

    /// The age of the oldest record of the group's partitions not replicated yet.
    pub fn rpo_age_ms(&self) -> Option<i64> {
        self.lags.iter().filter(|l| self.reads(l)).filter_map(|l| l.oldest_age_ms).max()
    }
}

/// Computes the failover plan of `group`.
pub fn plan_failover(view: &FlowView, group: &str) -> Result<FailoverPlan, FlowError> {
    let positions = translate_group(view, group)?;
    let lags = if view.source_reachable { partition_lags(view)? } else { Vec::new() };
    Ok(FailoverPlan { group: group.to_string(), positions, lags, source_reachable: view.source_reachable })
}

/// The groups a whole-flow failover moves: with the source up, its groups that the flow
/// checkpoints (`groups`/`groups.exclude` and the policy's group filter); with it down, the
/// groups the flow wrote checkpoints for. Sorted.
pub fn flow_groups(view: &FlowView) -> Result<Vec<String>, FlowError> {
    let mut groups: Vec<String> = if view.source_reachable {
        let filters = view.policy.filters(&view.flow)?;
        let mut kept = Vec::new();
        for group in Groups::connect(&view.source, &view.flow.consumer)?.list()? {
            let listed = view.flow.checkpoints.as_ref().is_none_or(|c| c.groups.matches(&group));
            if group != "strait" && listed && filters.group(&group)? {
                kept.push(group);
            }
        }
        kept
    } else {
        view.all_checkpoints()?.into_keys().collect()
    };
    groups.sort();
    Ok(groups)
}

/// The plan of every group of the flow (see [`flow_groups`]) that has a position to move.
pub fn plan_flow_failover(view: &FlowView) -> Result<Vec<FailoverPlan>, FlowError> {
    let groups = flow_groups(view)?;
    let lags = if view.source_reachable { partition_lags(view)? } else { Vec::new() };
    Ok(translate_groups(view, &groups)?
        .into_iter()
        .filter(|(_, positions)| positions.iter().any(|p| p.translated.is_some()))
        .map(|(group, positions)| FailoverPlan {
            group,
            positions,
            lags: lags.clone(),
            source_reachable: view.source_reachable,
        })
        .collect())
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
