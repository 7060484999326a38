//! One partition of a verification: the source read and run through the flow's record policy,
//! the target read where the stored mapping puts that stretch, and the two compared.

use std::collections::HashSet;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, DefaultConsumerContext};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::compare::{compare, Expected, Findings, Found};
use super::read::{digests, message_headers, read_range, Content, Throttle};
use super::report::{Bound, PartitionVerdict, Progress, VerifyOptions};
use crate::active_active::provenance;
use crate::cluster::{create_client, ClusterError, ASSIGN_ONLY_CONSUMER};
use crate::flows::FlowError;
use crate::offsets::{PartitionMap, Run};
use crate::operator::FlowView;
use crate::policy::BatchHook;
use crate::record::{Batch, SourceOffset, TargetOffset};

/// How long finding a partition's extent or an offset for a time may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Source records run through the flow's record policy at a time.
const HOOK_BATCH: usize = 500;

/// The remote partition's topic, and whether that topic compacts.
pub struct Remote<'a> {
    /// The topic on the target.
    pub topic: &'a str,
    /// Whether its cleanup policy compacts (a record replaced by a newer one of its key is not missing).
    pub compacted: bool,
}

/// What every partition of one verification shares: the readers, the flow's record policy,
/// the rate and the counts.
pub struct Verifier<'a> {
    view: &'a FlowView,
    options: &'a VerifyOptions,
    source: BaseConsumer,
    target: BaseConsumer,
    hook: Option<BatchHook>,
    /// The target's alias when the flow drops records that came from it (loop prevention).
    looped_from: Option<String>,
    schema_ids: bool,
    throttle: Throttle,
    records: u64,
}

/// The source side of one partition: what the target should hold.
struct Expectation {
    expected: Vec<Expected>,
    /// Every source offset read (compaction leaves holes).
    present: HashSet<i64>,
    /// Records the policy drops, loop prevention drops, or the policy routes elsewhere.
    not_expected: u64,
}

impl<'a> Verifier<'a> {
    /// Readers of both clusters and an instance of the flow's record policy, if it has one.
    pub fn new(view: &'a FlowView, options: &'a VerifyOptions) -> Result<Self, FlowError> {
        let hook = view.policy.records.as_ref().map(|c| c.instantiate(&view.flow).map(BatchHook::new)).transpose()?;
        let provenance_on = provenance::enabled(&view.flow, &view.naming)?;
        Ok(Self {
            view,
            options,
            source: assigned(view, true)?,
            target: assigned(view, false)?,
            hook,
            looped_from: provenance_on.then(|| view.target.alias.to_string()),
            schema_ids: view.flow.schemas.is_some(),
            throttle: Throttle::new(options.max_bytes_per_second),
            records: 0,
        })
    }

    /// How far the verification has come after `done` of `of` partitions.
    pub fn progress(&self, done: usize, of: usize) -> Progress {
        Progress { partitions_done: done, partitions: of, records: self.records, bytes: self.throttle.bytes() }
    }

    /// Bytes read from both clusters so far.
    pub fn bytes_read(&self) -> u64 {
        self.throttle.bytes()
    }

    /// Verifies source partition `topic`-`partition`, whose stored mapping is `map`.
    pub fn partition(
        &mut self,
        topic: &str,
        partition: i32,
        map: &PartitionMap,
        remote: Remote<'_>,
    ) -> Result<PartitionVerdict, FlowError> {
        let mut verdict = PartitionVerdict {
            topic: topic.to_string(),
            partition,
            target_topic: remote.topic.to_string(),
            source_range: (0, 0),
            target_range: (0, 0),
            findings: Findings::default(),
            not_expected: 0,
            skipped: None,
        };
        let side = Side { consumer: &self.source, alias: self.view.source.alias.as_str(), topic, partition };
        let window = match window(&side, map, self.options)? {
            Ok(w) => w,
            Err(why) => {
                verdict.skipped = Some(why);
                return Ok(verdict);
            }
        };
        verdict.source_range = window;
        let expectation = self.expectation(topic, partition, map, window)?;
        verdict.not_expected = expectation.not_expected;
        let found = self.found(&mut verdict, map, &expectation)?;
        verdict.findings = compare(&expectation.expected, &found, remote.compacted);
        Ok(verdict)
    }

    /// Reads the source window and runs the flow's record policy on it.
    fn expectation(
        &mut self,
        topic: &str,
        partition: i32,
        map: &PartitionMap,
        window: (i64, i64),
    ) -> Result<Expectation, FlowError> {
        let mut out = Expectation { expected: Vec::new(), present: HashSet::new(), not_expected: 0 };
        let mut batch = Batch::with_capacity(HOOK_BATCH, 1 << 20);
        let mut failed = None;
        let (mut hook, looped_from, schema_ids) = (self.hook.as_mut(), self.looped_from.as_deref(), self.schema_ids);
        let alias = self.view.source.alias.as_str();
        read_range(&self.source, alias, topic, partition, window, &mut self.throttle, |m| {
            out.present.insert(m.offset());
            let headers = message_headers(m);
            let timestamp = m.timestamp().to_millis().unwrap_or(-1);
            batch.push(0, SourceOffset(m.offset()), timestamp, m.key(), m.payload(), headers);
            if batch.records.len() >= HOOK_BATCH && failed.is_none() {
                let full = std::mem::replace(&mut batch, Batch::with_capacity(HOOK_BATCH, 1 << 20));
                let policy = Policy { hook: hook.as_deref_mut(), topic, looped_from, schema_ids };
                match policy.expect(full, map, &mut out.expected) {
                    Ok(n) => out.not_expected += n,
                    Err(e) => failed = Some(e),
                }
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        let policy = Policy { hook, topic, looped_from, schema_ids };
        out.not_expected += policy.expect(batch, map, &mut out.expected)?;
        self.records += out.present.len() as u64;
        Ok(out)
    }

    /// Reads the target where the mapping put the window (setting `verdict.target_range`), and
    /// past it the copies of window records written again.
    fn found(
        &mut self,
        verdict: &mut PartitionVerdict,
        map: &PartitionMap,
        expectation: &Expectation,
    ) -> Result<Vec<Found>, FlowError> {
        let (topic, partition, window) = (verdict.target_topic.as_str(), verdict.partition, verdict.source_range);
        let alias = self.view.target.alias.as_str();
        let (low, high) = watermarks(&self.target, alias, topic, partition)?;
        let from = map.translate(SourceOffset(window.0)).map_or(low, |t| t.get()).max(low);
        let until = map.translate(SourceOffset(window.1)).map_or(high, |t| t.get()).min(high);
        verdict.target_range = (from, until.max(from));
        let runs: Vec<Run> = map.runs().copied().collect();
        let schema_ids = self.schema_ids;
        let mut found = Vec::new();
        read_range(&self.target, alias, topic, partition, verdict.target_range, &mut self.throttle, |m| {
            let (digest, _) = digests(content(m), message_headers(m), schema_ids);
            let source_gone = origin(&runs, TargetOffset(m.offset()))
                .is_some_and(|s| s.get() >= window.0 && s.get() < window.1 && !expectation.present.contains(&s.get()));
            found.push(Found { offset: TargetOffset(m.offset()), digest, source_gone });
        })?;
        // Past the window the target holds what the flow wrote since it last stored its
        // position, and whatever else was written there: a copy of a record in the window is
        // a duplicate; the rest is for a later verification. An exactly-once target may end
        // in an open transaction a `read_committed` read would wait out, so it is not read.
        if self.options.until.is_none() && !self.view.flow.exactly_once && high > verdict.target_range.1 {
            let in_window: HashSet<u64> = expectation.expected.iter().map(|e| e.digest).collect();
            let tail = (verdict.target_range.1, high);
            read_range(&self.target, alias, topic, partition, tail, &mut self.throttle, |m| {
                let (digest, _) = digests(content(m), message_headers(m), schema_ids);
                if in_window.contains(&digest) {
                    found.push(Found { offset: TargetOffset(m.offset()), digest, source_gone: false });
                }
            })?;
        }
        self.records += found.len() as u64;
        Ok(found)
    }
}

/// The flow's record policy as the verification runs it on one batch of source records.
struct Policy<'h, 's> {
    hook: Option<&'h mut BatchHook>,
    topic: &'s str,
    looped_from: Option<&'s str>,
    schema_ids: bool,
}

impl Policy<'_, '_> {
    /// Runs loop prevention and the record hook on `batch` as the filter and transform stages
    /// do, and appends what the target should hold of what is left; returns how many records it
    /// does not expect here (dropped, or routed to another topic).
    fn expect(self, mut batch: Batch, map: &PartitionMap, out: &mut Vec<Expected>) -> Result<u64, FlowError> {
        let before = batch.records.len();
        if let Some(target) = self.looped_from {
            let keep: Vec<bool> = batch
                .records
                .iter()
                .map(|r| !provenance::of(batch.headers(r)).is_some_and(|p| provenance::contains(p, target)))
                .collect();
            batch.retain(&keep);
        }
        if let Some(hook) = self.hook.filter(|_| !batch.records.is_empty()) {
            let topic = self.topic;
            hook.pack(&mut batch, |_| topic.to_string());
            let verdict = hook.call();
            hook.unpack(&mut batch);
            let verdict = verdict.map_err(crate::pipeline::StageError::from)?;
            let mut keep = vec![true; batch.records.len()];
            for &i in &verdict.drop {
                if let Some(k) = keep.get_mut(i as usize) {
                    *k = false;
                }
            }
            batch.edits = verdict.edits;
            batch.retain(&keep);
            for edit in std::mem::take(&mut batch.edits) {
                batch.apply(edit);
            }
        }
        let mut routed = 0;
        for r in &batch.records {
            if r.route.is_some() {
                routed += 1;
                continue;
            }
            let content = Content { key: batch.key(r), value: batch.value(r), timestamp: r.timestamp };
            let (digest, key) = digests(content, batch.headers(r), self.schema_ids);
            out.push(Expected { source: r.offset, at: map.place(r.offset), digest, key });
        }
        Ok((before - batch.records.len()) as u64 + routed)
    }
}

/// A message's key, value and timestamp.
fn content<'m>(m: &'m BorrowedMessage<'_>) -> Content<'m> {
    Content { key: m.key(), value: m.payload(), timestamp: m.timestamp().to_millis().unwrap_or(-1) }
}

/// A `read_committed` reader of the source (`true`) or the target.
fn assigned(view: &FlowView, source: bool) -> Result<BaseConsumer, ClusterError> {
    let (cluster, settings) =
        if source { (&view.source, &view.flow.consumer) } else { (&view.target, &view.flow.target_admin) };
    create_client(cluster, settings, "consumer", &[], ASSIGN_ONLY_CONSUMER, DefaultConsumerContext)
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
