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
mod read;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, DefaultConsumerContext};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};
use regex::Regex;
use serde::Serialize;

pub use compare::{compare, Expected, Findings, Found, Tally};
use read::{digests, message_headers, read_range, Content, Throttle};

use super::FlowView;
use crate::active_active::provenance;
use crate::cluster::{create_client, ClusterAdmin, ClusterError, ASSIGN_ONLY_CONSUMER};
use crate::flows::FlowError;
use crate::offsets::{PartitionMap, Run};
use crate::policy::{BatchHook, FlowPolicy, PolicyEngine, ReplicationPolicy};
use crate::record::{Batch, RecordEdit, SourceOffset, TargetOffset};

/// How long finding a partition's extent or an offset for a time may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Source records run through the flow's record policy at a time.
const HOOK_BATCH: usize = 500;

/// One end of the window a verification covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// A source offset (the same in every partition).
    Offset(i64),
    /// The first source record written at or after this time, in milliseconds since the epoch.
    Time(i64),
}

/// What `strait verify` checks, and how.
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// Only source topics matching this (within the flow's own topics).
    pub topics: Option<Regex>,
    /// Start of the window (default: the oldest record the source and the mapping both have).
    pub from: Option<Bound>,
    /// End of the window, exclusive (default: the flow's stored position).
    pub until: Option<Bound>,
    /// Read at most this many bytes per second, both clusters together.
    pub max_bytes_per_second: Option<u64>,
    /// Count duplicates as a failure even in an at-least-once flow.
    pub fail_on_duplicates: bool,
}

/// One partition's result.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionVerdict {
    /// The source topic.
    pub topic: String,
    /// The partition (the same on both sides).
    pub partition: i32,
    /// The topic on the target.
    pub target_topic: String,
    /// Source offsets compared, `[from, until)`.
    pub source_range: (i64, i64),
    /// Target offsets read, `[from, until)`.
    pub target_range: (i64, i64),
    /// What the comparison found.
    pub findings: Findings,
    /// Source records the flow's policy drops or sends to another topic: not expected here.
    pub not_expected: u64,
    /// Why the partition was not compared, when it was not.
    pub skipped: Option<String>,
}

/// The result of a verification.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// `source->target`.
    pub flow: String,
    /// Whether the flow is exactly-once: a duplicate is a failure there.
    pub exactly_once: bool,
    /// Whether duplicates fail the verification.
    pub duplicates_fail: bool,
    /// Every partition, in topic and partition order.
    pub partitions: Vec<PartitionVerdict>,
    /// The counts over all partitions.
    pub total: Findings,
    /// Whether the copy verified clean.
    pub clean: bool,
    /// Bytes read from both clusters.
    pub bytes_read: u64,
    /// How long the verification took.
    pub seconds: f64,
}

/// How far a verification has come, for a progress line.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Partitions finished.
    pub partitions_done: usize,
    /// Partitions to check.
    pub partitions: usize,
    /// Records read so far, both sides.
    pub records: u64,
    /// Bytes read so far, both sides.
    pub bytes: u64,
}

/// Verifies `view`'s flow as `options` say, calling `progress` every few thousand records.
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
    let source = assigned(view, true)?;
    let target = assigned(view, false)?;
    let policy = FlowPolicy::load(PolicyEngine::shared()?, &view.flow)?;
    let mut hook = policy.records.as_ref().map(|c| c.instantiate(&view.flow).map(BatchHook::new)).transpose()?;
    let provenance_on = match view.flow.provenance {
        Some(on) => on,
        None => view.naming.format_remote_topic(view.source.alias.as_str(), "strait-probe")? == "strait-probe",
    };
    let looped_from = provenance_on.then(|| view.target.alias.to_string());
    let schema_ids = view.flow.schemas.is_some();

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

    let mut throttle = Throttle::new(options.max_bytes_per_second);
    let mut records = 0u64;
    let mut partitions = Vec::new();
    for (n, ((topic, partition), target_topic)) in keys.iter().zip(&target_topics).enumerate() {
        let Some(map) = view.translation.forward.get(topic, *partition) else { continue };
        let mut verdict = PartitionVerdict {
            topic: topic.to_string(),
            partition: *partition,
            target_topic: target_topic.clone(),
            source_range: (0, 0),
            target_range: (0, 0),
            findings: Findings::default(),
            not_expected: 0,
            skipped: None,
        };
        let side = Side { consumer: &source, alias: view.source.alias.as_str(), topic, partition: *partition };
        let window = match window(&side, map, options)? {
            Ok(w) => w,
            Err(why) => {
                verdict.skipped = Some(why);
                partitions.push(verdict);
                continue;
            }
        };
        verdict.source_range = window;

        // What should be on the target, with the source offsets read (compaction leaves holes).
        let mut expected = Vec::new();
        let mut present = HashSet::new();
        let mut batch = Batch::with_capacity(HOOK_BATCH, 1 << 20);
        let mut expect = |batch: &mut Batch, expected: &mut Vec<Expected>| -> Result<u64, FlowError> {
            let dropped = expectations(batch, hook.as_mut(), topic, looped_from.as_deref(), schema_ids, map, expected)?;
            *batch = Batch::with_capacity(HOOK_BATCH, 1 << 20);
            Ok(dropped)
        };
        let mut hook_failed = None;
        read_range(&source, side.alias, topic, *partition, window, &mut throttle, |m| {
            present.insert(m.offset());
            let headers = message_headers(m);
            batch.push(
                0,
                SourceOffset(m.offset()),
                m.timestamp().to_millis().unwrap_or(-1),
                m.key(),
                m.payload(),
                headers,
            );
            if batch.records.len() >= HOOK_BATCH && hook_failed.is_none() {
                match expect(&mut batch, &mut expected) {
                    Ok(d) => verdict.not_expected += d,
                    Err(e) => hook_failed = Some(e),
                }
            }
        })?;
        if let Some(e) = hook_failed {
            return Err(e);
        }
        verdict.not_expected += expect(&mut batch, &mut expected)?;
        records += present.len() as u64;

        // Where the mapping put that stretch on the target, up to where the next record lands.
        let (t_low, t_high) = watermarks(&target, view.target.alias.as_str(), target_topic, *partition)?;
        let t_from = map.translate(SourceOffset(window.0)).map_or(t_low, |t| t.get()).max(t_low);
        let t_until = map.translate(SourceOffset(window.1)).map_or(t_high, |t| t.get()).min(t_high);
        verdict.target_range = (t_from, t_until.max(t_from));
        let runs: Vec<Run> = map.runs().copied().collect();
        let mut found = Vec::new();
        read_range(
            &target,
            view.target.alias.as_str(),
            target_topic,
            *partition,
            verdict.target_range,
            &mut throttle,
            |m| {
                let (digest, _) = digests(content(m), message_headers(m), schema_ids);
                let source_gone = origin(&runs, TargetOffset(m.offset()))
                    .is_some_and(|s| s.get() >= window.0 && s.get() < window.1 && !present.contains(&s.get()));
                found.push(Found { offset: TargetOffset(m.offset()), digest, source_gone });
            },
        )?;
        // Past the window the target holds what the flow wrote since it last stored its
        // position, and whatever else was written there: a copy of a record in the window is
        // a duplicate; the rest is for a later verification. An exactly-once target may end
        // in an open transaction a `read_committed` read would wait out, so it is not read.
        if options.until.is_none() && !view.flow.exactly_once && t_high > verdict.target_range.1 {
            let digests_in_window: HashSet<u64> = expected.iter().map(|e| e.digest).collect();
            let tail = (verdict.target_range.1, t_high);
            read_range(&target, view.target.alias.as_str(), target_topic, *partition, tail, &mut throttle, |m| {
                let (digest, _) = digests(content(m), message_headers(m), schema_ids);
                if digests_in_window.contains(&digest) {
                    found.push(Found { offset: TargetOffset(m.offset()), digest, source_gone: false });
                }
            })?;
        }
        records += found.len() as u64;
        verdict.findings = compare(&expected, &found, compacted.contains(target_topic));
        partitions.push(verdict);
        progress(Progress { partitions_done: n + 1, partitions: keys.len(), records, bytes: throttle.bytes() });
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
        bytes_read: throttle.bytes(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// A `read_committed` reader of the source (`true`) or the target.
fn assigned(view: &FlowView, source: bool) -> Result<BaseConsumer, ClusterError> {
    let (cluster, settings) =
        if source { (&view.source, &view.flow.consumer) } else { (&view.target, &view.flow.target_admin) };
    create_client(cluster, settings, "consumer", &[], ASSIGN_ONLY_CONSUMER, DefaultConsumerContext)
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

/// One partition of one cluster.
struct Side<'a> {
    consumer: &'a BaseConsumer,
    alias: &'a str,
    topic: &'a str,
    partition: i32,
}

fn watermarks(consumer: &BaseConsumer, alias: &str, topic: &str, partition: i32) -> Result<(i64, i64), ClusterError> {
    consumer.fetch_watermarks(topic, partition, LOOKUP_TIMEOUT).map_err(|e| ClusterError::Client {
        alias: alias.to_string(),
        what: format!("reading the extent of {topic}-{partition}"),
        reason: e.to_string(),
    })
}

/// The source offsets to compare, `[from, until)`: from the oldest record both the source and
/// the mapping still have, up to the flow's stored position, narrowed by the options. `Err`
/// says why there is nothing to compare.
fn window(
    side: &Side<'_>,
    map: &PartitionMap,
    options: &VerifyOptions,
) -> Result<Result<(i64, i64), String>, ClusterError> {
    let Some(next) = map.next() else { return Ok(Err("the flow has not replicated a record of it yet".into())) };
    let Some(first_run) = map.runs().next() else {
        return Ok(Err("the flow stored no run of it yet (nothing replicated)".into()));
    };
    let (low, high) = watermarks(side.consumer, side.alias, side.topic, side.partition)?;
    let mut from = low.max(first_run.upstream.get());
    let mut until = next.get().min(high);
    if let Some(b) = options.from {
        from = from.max(offset_of(side, b, high)?);
    }
    if let Some(b) = options.until {
        until = until.min(offset_of(side, b, high)?);
    }
    if from >= until {
        return Ok(Err(format!("nothing to compare between offsets {from} and {until}")));
    }
    Ok(Ok((from, until)))
}

/// The source offset a bound stands for; a time past the last record is the partition's end.
fn offset_of(side: &Side<'_>, bound: Bound, end: i64) -> Result<i64, ClusterError> {
    let time = match bound {
        Bound::Offset(o) => return Ok(o),
        Bound::Time(ms) => ms,
    };
    let fail = |reason: String| ClusterError::Client {
        alias: side.alias.to_string(),
        what: format!("finding the offset of time {time} in {}-{}", side.topic, side.partition),
        reason,
    };
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(side.topic, side.partition, Offset::Offset(time)).map_err(|e| fail(e.to_string()))?;
    let found = side.consumer.offsets_for_times(tpl, LOOKUP_TIMEOUT).map_err(|e| fail(e.to_string()))?;
    let offset = found.find_partition(side.topic, side.partition).map(|e| e.offset());
    Ok(match offset {
        Some(Offset::Offset(o)) => o,
        _ => end,
    })
}

/// The source offset the mapping traces target offset `downstream` to, when a run covers it.
/// Runs are in source order and, since a target that went back clears them, in target order too.
fn origin(runs: &[Run], downstream: TargetOffset) -> Option<SourceOffset> {
    let after = runs.partition_point(|r| r.downstream <= downstream);
    let run = runs.get(after.checked_sub(1)?)?;
    let into = downstream.since(run.downstream);
    (into < run.len).then(|| run.upstream.after(into))
}

/// A message's key, value and timestamp.
fn content<'m>(m: &'m BorrowedMessage<'_>) -> Content<'m> {
    Content { key: m.key(), value: m.payload(), timestamp: m.timestamp().to_millis().unwrap_or(-1) }
}

/// Runs the flow's record policy on `batch` as the filter and transform stages do, and appends
/// what the target should hold of what is left; returns how many records it does not expect
/// here (dropped by the policy or by loop prevention, or routed to another topic).
fn expectations(
    batch: &mut Batch,
    hook: Option<&mut BatchHook>,
    topic: &str,
    looped_from: Option<&str>,
    schema_ids: bool,
    map: &PartitionMap,
    out: &mut Vec<Expected>,
) -> Result<u64, FlowError> {
    let before = batch.records.len();
    if before == 0 {
        return Ok(0);
    }
    // Loop prevention first, as the flow's filters run it.
    if let Some(target) = looped_from {
        let keep: Vec<bool> = batch
            .records
            .iter()
            .map(|r| !provenance::of(batch.headers(r)).is_some_and(|p| provenance::contains(p, target)))
            .collect();
        batch.retain(&keep);
    }
    if let Some(hook) = hook.filter(|_| !batch.records.is_empty()) {
        hook.pack(batch, |_| topic.to_string());
        let verdict = hook.call();
        hook.unpack(batch);
        let verdict = verdict.map_err(crate::pipeline::StageError::from)?;
        let mut keep = vec![true; batch.records.len()];
        for &i in &verdict.drop {
            if let Some(k) = keep.get_mut(i as usize) {
                *k = false;
            }
        }
        batch.edits = verdict.edits;
        batch.retain(&keep);
    }
    let edits: HashMap<u32, &RecordEdit> = batch.edits.iter().map(|e| (e.position, e)).collect();
    let mut routed = 0;
    for (i, r) in batch.records.iter().enumerate() {
        let edit = edits.get(&(i as u32));
        if edit.is_some_and(|e| e.topic.is_some()) {
            routed += 1;
            continue;
        }
        let key = match edit.and_then(|e| e.key.as_ref()) {
            Some(k) => k.as_deref(),
            None => batch.key(r),
        };
        let value = match edit.and_then(|e| e.value.as_ref()) {
            Some(v) => v.as_deref(),
            None => batch.value(r),
        };
        let timestamp = edit.and_then(|e| e.timestamp).unwrap_or(r.timestamp);
        let headers = match edit.and_then(|e| e.headers.as_deref()) {
            Some(h) => crate::record::Headers::new(h),
            None => batch.headers(r),
        };
        let (digest, key) = digests(Content { key, value, timestamp }, headers, schema_ids);
        out.push(Expected { source: r.offset, at: map.place(r.offset), digest, key });
    }
    Ok((before - batch.records.len()) as u64 + routed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_follows_runs_and_stops_at_their_ends() {
        let runs = [
            Run { upstream: SourceOffset(0), downstream: TargetOffset(0), len: 3 },
            Run { upstream: SourceOffset(4), downstream: TargetOffset(5), len: 2 },
        ];
        assert_eq!(origin(&runs, TargetOffset(2)), Some(SourceOffset(2)));
        assert_eq!(origin(&runs, TargetOffset(3)), None, "a duplicate between runs");
        assert_eq!(origin(&runs, TargetOffset(6)), Some(SourceOffset(5)));
        assert_eq!(origin(&runs, TargetOffset(7)), None);
    }
}
