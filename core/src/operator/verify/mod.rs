//! `strait verify`: proof that the target holds every source record of a flow once, in order,
//! with the same content, read through the flow's own stored offset mapping.
//!
//! Per partition, the source is read from the window's start up to the position the flow has
//! stored (everything before it the target acknowledged), the flow's record policy is run on
//! it as the flow runs it, and the target's records where the mapping put that stretch are read
//! and compared ([`compare`]). Both sides are read `read_committed`, so transaction markers and
//! aborted records are not records on either side; a source offset compaction emptied is not a
//! record either. Reading while replication runs is safe: the window ends where the flow's
//! stored position is, and what lies past it is left for the next run of the command.

mod compare;
mod partition;
mod read;
mod report;

use std::collections::HashSet;
use std::time::Instant;

pub use compare::{compare, Expected, Findings, Found, Tally};
use partition::{Remote, Verifier};
pub use report::{Bound, PartitionVerdict, Progress, VerifyOptions, VerifyReport};

use super::FlowView;
use crate::cluster::{ClusterAdmin, ClusterError};
use crate::flows::FlowError;
use crate::policy::ReplicationPolicy;

/// Verifies `view`'s flow as `options` say, calling `progress` after each partition.
pub fn verify_flow(
    view: &FlowView,
    options: &VerifyOptions,
    mut progress: impl FnMut(Progress),
) -> Result<VerifyReport, FlowError> {
    let started = Instant::now();
    if !view.source_reachable {
        return Err(ClusterError::Client {
            alias: view.source.alias.to_string(),
            what: "verifying the copy".into(),
            reason: "the source does not answer; verify compares with the source, run it once the source is back"
                .into(),
        }
        .into());
    }
    let mut keys: Vec<&(String, i32)> = view
        .translation
        .forward
        .partitions
        .keys()
        .filter(|(t, _)| view.flow.topics.matches(t) && options.topics.as_ref().is_none_or(|r| r.is_match(t)))
        .collect();
    keys.sort();
    let target_topics: Vec<String> = keys
        .iter()
        .map(|(t, _)| view.naming.format_remote_topic(view.source.alias.as_str(), t))
        .collect::<Result<_, _>>()?;
    let compacted = compacted_topics(view, &target_topics)?;
    let mut verifier = Verifier::new(view, options)?;
    let mut partitions = Vec::new();
    for (n, ((topic, partition), target_topic)) in keys.iter().zip(&target_topics).enumerate() {
        let Some(map) = view.translation.forward.get(topic, *partition) else { continue };
        let remote = Remote { topic: target_topic, compacted: compacted.contains(target_topic) };
        partitions.push(verifier.partition(topic, *partition, map, remote)?);
        progress(verifier.progress(n + 1, keys.len()));
    }
    let exactly_once = view.flow.exactly_once;
    let duplicates_fail = exactly_once || options.fail_on_duplicates;
    let mut total = Findings::default();
    partitions.iter().for_each(|p| total.absorb(&p.findings));
    let clean = partitions.iter().all(|p| p.findings.clean(duplicates_fail));
    Ok(VerifyReport {
        flow: view.name.clone(),
        exactly_once,
        duplicates_fail,
        partitions,
        total,
        clean,
        bytes_read: verifier.bytes_read(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The target topics whose cleanup policy compacts.
fn compacted_topics(view: &FlowView, topics: &[String]) -> Result<HashSet<String>, FlowError> {
    let admin = ClusterAdmin::connect(&view.target, &view.flow.target_admin)?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect::<HashSet<_>>().into_iter().collect();
    let configs = admin.topic_configs(&names)?;
    Ok(configs
        .into_iter()
        .filter(|(_, c)| {
            c.as_ref().is_ok_and(|entries| {
                entries
                    .iter()
                    .any(|e| e.name == "cleanup.policy" && e.value.as_deref().is_some_and(|v| v.contains("compact")))
            })
        })
        .map(|(t, _)| t)
        .collect())
}
