//! `strait status`: per flow, how old its newest heartbeat is and how far replication lags.

use super::lag::partition_lags;
use super::FlowView;
use crate::clock::now_millis;
use crate::flows::FlowError;
use crate::group::{by_settings, group_id, Stamp};
use crate::offsets::mm2::Heartbeat;
use crate::offsets::store::read_topic;
use crate::policy::ReplicationPolicy;

/// The health of one flow.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowStatus {
    /// `source->target`.
    pub flow: String,
    /// Age of the newest heartbeat this flow wrote to the target's heartbeats topic: how long
    /// ago strait last ran it.
    pub heartbeat_age_ms: Option<i64>,
    /// Age of the newest heartbeat replicated from the source (`<source>.heartbeats`), which
    /// exists when some flow writes heartbeats to the source: end-to-end freshness.
    pub replicated_heartbeat_age_ms: Option<i64>,
    /// Offsets not yet replicated, over all partitions (`None` when the source is down).
    pub lag_records: Option<i64>,
    /// Age of the oldest unreplicated record, over all partitions.
    pub lag_seconds: Option<f64>,
    /// The members of the flow's group on the target, by the settings they run.
    pub group: GroupStatus,
}

/// The members of a flow's group by the settings they run, beside this config's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupStatus {
    /// The fingerprint of the flow's settings in the config `strait status` read.
    pub settings: u64,
    /// (settings, the newest member's stamp, members), the newest settings first.
    pub by_settings: Vec<(u64, Stamp, usize)>,
    /// Members that are not strait's.
    pub foreign: usize,
}

impl GroupStatus {
    /// One word for scripts and people: `none` (no process runs the flow), `agreed` (every
    /// member runs this config's settings), `other` (every member runs one set of settings,
    /// not this config's), or `disagree` (members run different settings: only the newest copy).
    pub fn verdict(&self) -> &'static str {
        match (self.by_settings.as_slice(), self.foreign) {
            ([], 0) => "none",
            ([(settings, _, _)], 0) if *settings == self.settings => "agreed",
            ([_], 0) => "other",
            _ => "disagree",
        }
    }
}

impl std::fmt::Display for GroupStatus {
    /// `agreed(2)`, or for a disagreement every set of settings with its member count, newest
    /// first, marking this config's: `disagree: 1x00000000000000ab@1700000000000 (this config), 1x…`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let members: usize = self.by_settings.iter().map(|g| g.2).sum::<usize>() + self.foreign;
        match self.verdict() {
            verdict @ ("none" | "agreed") => write!(f, "{verdict}({members})"),
            verdict => {
                let sets: Vec<String> = self
                    .by_settings
                    .iter()
                    .map(|(settings, stamp, n)| {
                        let mine = if *settings == self.settings { " (this config)" } else { "" };
                        format!("{n}x{settings:016x}@{}{mine}", stamp.since)
                    })
                    .chain((self.foreign > 0).then(|| format!("{}x not strait", self.foreign)))
                    .collect();
                write!(f, "{verdict}: {}", sets.join(", "))
            }
        }
    }
}

/// Reads the status of `view`'s flow.
pub fn flow_status(view: &FlowView) -> Result<FlowStatus, FlowError> {
    let now = now_millis();
    let (source, target) = (view.source.alias.as_str(), view.target.alias.as_str());
    let heartbeats = view.naming.heartbeats_topic()?;
    let newest = |topic: &str, own: bool| -> Result<Option<i64>, FlowError> {
        let mut newest: Option<i64> = None;
        if view.target_groups.topic_exists(topic)? {
            read_topic(&view.target, &view.flow.target_admin, topic, super::WHOLE_TOPIC_READ_TIMEOUT, |k, v| {
                if let Some(h) = v.and_then(|v| Heartbeat::decode(k, v)) {
                    if !own || (h.source == source && h.target == target) {
                        newest = Some(newest.map_or(h.timestamp, |n| n.max(h.timestamp)));
                    }
                }
            })?;
        }
        Ok(newest.map(|ts| (now - ts).max(0)))
    };
    let heartbeat_age_ms = newest(&heartbeats, true)?;
    let replicated_heartbeat_age_ms = newest(&view.naming.format_remote_topic(source, &heartbeats)?, false)?;
    let (lag_records, lag_seconds) = if view.source_reachable {
        let lags = partition_lags(view)?;
        let records = lags.iter().map(|l| l.unreplicated).sum();
        let oldest = lags.iter().filter_map(|l| l.oldest_age_ms).max().unwrap_or(0);
        (Some(records), Some(oldest as f64 / 1000.0))
    } else {
        (None, None)
    };
    let members: Vec<Option<Stamp>> =
        view.target_groups.client_ids(&group_id(&view.flow))?.iter().map(|id| Stamp::parse(id)).collect();
    let (by_settings, foreign) = by_settings(&members);
    let group = GroupStatus { settings: view.settings, by_settings, foreign };
    Ok(FlowStatus {
        flow: view.name.clone(),
        heartbeat_age_ms,
        replicated_heartbeat_age_ms,
        lag_records,
        lag_seconds,
        group,
    })
}
