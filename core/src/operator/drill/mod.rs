//! `strait drill`: a failover rehearsed on a live pair, on strait's own canary topic and group,
//! without touching the operator's clients.
//!
//! The canary topic must cross the flow under the operator's own filters, so the drill goes the
//! way real records go. Each drill writes a fresh stretch of canary records, stops a fresh
//! canary group half-way through each partition, and at that moment (the decision) measures the
//! RPO of every partition of the flow. It then fails the group over with strait's translation
//! once the flow's stored mapping covers its stop, resumes it on the target, and checks record
//! by record that it went on from exactly where it stopped; the RTO is the time from the
//! decision to the first record read there. Last, [`verify_flow`] checks the drill's window.

mod resume;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, DefaultConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;

pub use resume::{resumed, Resumed};

use super::failover::{apply_failover, FailoverPlan};
use super::lag::partition_lags;
use super::verify::{verify_flow, Bound, VerifyOptions, VerifyReport};
use super::{translate_groups, FlowView};
use crate::checkpoints::{Committed, Groups, SyncOutcome};
use crate::clock::now_millis;
use crate::cluster::{create_client, ClusterAdmin, ClusterError, TopicSpec};
use crate::config::Config;
use crate::flows::FlowError;
use crate::topics::topic_verdict;

/// How often the drill reads the flow's positions again while it waits for them.
const RELOAD: Duration = Duration::from_millis(500);

/// What a drill does.
#[derive(Debug, Clone)]
pub struct DrillOptions {
    /// The canary topic on the source; it must pass the flow's topic filters.
    pub canary_topic: String,
    /// Partitions of the canary topic when the drill creates it.
    pub partitions: i32,
    /// Canary records each drill writes per partition; the group stops half-way.
    pub records: i64,
    /// How long each wait of the drill may take.
    pub timeout: Duration,
}

impl Default for DrillOptions {
    fn default() -> Self {
        Self { canary_topic: "strait-drill".into(), partitions: 3, records: 100, timeout: Duration::from_secs(120) }
    }
}

/// The RPO of one source partition at the decision.
#[derive(Debug, Clone, Serialize)]
pub struct RpoRow {
    /// Source topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offsets not yet on the target.
    pub records: i64,
    /// Age of the oldest of them, in seconds.
    pub seconds: Option<f64>,
}

/// How one canary partition failed over.
#[derive(Debug, Clone, Serialize)]
pub struct CanaryPartition {
    /// Partition.
    pub partition: i32,
    /// The source offset the group stopped at (the next it would read).
    pub stopped_at: i64,
    /// The target offset it resumed at.
    pub resumed_at: Option<i64>,
    /// What it read there.
    pub resumed: Resumed,
}

/// What a drill measured.
#[derive(Debug, Clone, Serialize)]
pub struct DrillReport {
    /// `source->target`.
    pub flow: String,
    /// The canary topic on the source.
    pub canary_topic: String,
    /// This drill's canary group.
    pub canary_group: String,
    /// When the failover was decided, in milliseconds since the epoch.
    pub decided_at_ms: i64,
    /// Per partition of the flow's topics, what was not on the target at the decision.
    pub rpo: Vec<RpoRow>,
    /// Records not on the target at the decision, over all partitions.
    pub rpo_records: i64,
    /// Age of the oldest of them, in seconds.
    pub rpo_seconds: Option<f64>,
    /// From the decision to the group's positions committed on the target, in seconds.
    pub failed_over_seconds: f64,
    /// From the decision to the first record the group read on the target (the RTO).
    pub rto_seconds: Option<f64>,
    /// Per canary partition.
    pub canary: Vec<CanaryPartition>,
    /// [`verify_flow`] over the canary records of this drill.
    pub verification: VerifyReport,
    /// Every canary partition resumed exactly and the verification is clean.
    pub passed: bool,
}

fn drill_error(alias: &str, reason: String) -> FlowError {
    ClusterError::Client { alias: alias.to_string(), what: "running the drill".into(), reason }.into()
}

/// Runs a drill on the flow `from->to` of `config`.
pub fn drill_flow(config: &Config, from: &str, to: &str, options: &DrillOptions) -> Result<DrillReport, FlowError> {
    let mut view = FlowView::load(config, from, to)?;
    if !view.source_reachable {
        return Err(drill_error(
            from,
            "the source does not answer; a drill needs both clusters (to fail over for real, use `strait failover`)"
                .into(),
        ));
    }
    let canary = Canary::stopped(&view, options)?;

    // The decision: what would be lost now, and the clock for the RTO.
    let decided = Instant::now();
    let decided_at_ms = now_millis();
    view.read_positions()?;
    let rpo = rpo_now(&view)?;
    let plan = wait_for_translation(&mut view, &canary.group, &canary.stops, options.timeout)?;
    if let SyncOutcome::Active(members) = apply_failover(&view, &plan)? {
        let group = &canary.group;
        return Err(drill_error(to, format!("the canary group {group} has {members} member(s) on {to}")));
    }
    let failed_over_seconds = decided.elapsed().as_secs_f64();
    let remote = plan.positions.first().map(|p| p.watched.target_topic.clone()).unwrap_or_default();
    let unread = options.records - canary.half;
    let ReadOnTarget { reads, first } =
        resume_on_target(&view, &remote, &canary.group, canary.partitions, unread, options.timeout)?;
    let canary_rows = canary.rows(&plan, &reads, options.records);
    let verification = verify_window(&mut view, &options.canary_topic, &canary.starts, options)?;
    Ok(DrillReport {
        flow: format!("{from}->{to}"),
        canary_topic: options.canary_topic.clone(),
        canary_group: canary.group,
        decided_at_ms,
        rpo_records: rpo.iter().map(|r| r.records).sum(),
        rpo_seconds: rpo.iter().filter_map(|r| r.seconds).reduce(f64::max),
        rpo,
        failed_over_seconds,
        rto_seconds: first.map(|t| t.duration_since(decided).as_secs_f64()),
        passed: canary_rows.iter().all(|c| c.resumed.exact()) && verification.clean,
        canary: canary_rows,
        verification,
    })
}

/// Per partition of the flow, what is not on the target now.
fn rpo_now(view: &FlowView) -> Result<Vec<RpoRow>, FlowError> {
    Ok(partition_lags(view)?
        .into_iter()
        .map(|l| RpoRow {
            topic: l.topic,
            partition: l.partition,
            records: l.unreplicated,
            seconds: l.oldest_age_ms.map(|ms| ms as f64 / 1000.0),
        })
        .collect())
}

/// This drill's canary records and group, stopped half-way through each partition.
struct Canary {
    /// Distinguishes this drill's records and group from earlier drills'.
    run: i64,
    group: String,
    /// The first offset of this drill's records, per partition.
    starts: BTreeMap<i32, i64>,
    /// Where the group stopped (the next offset it would read), per partition.
    stops: BTreeMap<i32, i64>,
    partitions: i32,
    /// Records per partition the group read before its stop.
    half: i64,
}

impl Canary {
    /// Checks the flow replicates the canary topic, writes this drill's records and commits a
    /// fresh group half-way through them on the source.
    fn stopped(view: &FlowView, options: &DrillOptions) -> Result<Self, FlowError> {
        let (from, to, canary) = (view.source.alias.as_str(), view.target.alias.as_str(), &options.canary_topic);
        let filters = view.policy.filters(&view.flow)?;
        if let Some(why) = topic_verdict(canary, &view.flow.topics, &view.naming, &filters, to)? {
            return Err(drill_error(
                from,
                format!(
                    "the flow does not replicate the canary topic `{canary}` ({why}); add it to `{from}->{to}.topics` \
                     (or give --canary-topic a topic the flow replicates)"
                ),
            ));
        }
        let run = now_millis();
        let group = format!("strait-drill.{from}-{to}.{run}");
        let (starts, partitions) = write_canary(view, options, run)?;
        let half = options.records / 2;
        let stops: BTreeMap<i32, i64> = starts.iter().map(|(&p, &s)| (p, s + half)).collect();
        let commits: Vec<Committed> = stops
            .iter()
            .map(|(&partition, &offset)| Committed {
                topic: canary.clone(),
                partition,
                offset,
                metadata: String::new(),
            })
            .collect();
        Groups::connect(&view.source, &view.flow.consumer)?.commit(&group, &commits)?;
        Ok(Self { run, group, starts, stops, partitions, half })
    }

    /// How each partition resumed, from what the group read on the target.
    fn rows(&self, plan: &FailoverPlan, reads: &HashMap<i32, Vec<String>>, records: i64) -> Vec<CanaryPartition> {
        let name = |p: i32, i: i64| canary_value(self.run, p, i);
        self.stops
            .iter()
            .map(|(&p, &stop)| {
                let done: Vec<String> = (0..self.half).map(|i| name(p, i)).collect();
                let unread: Vec<String> = (self.half..records).map(|i| name(p, i)).collect();
                let resumed_at = plan.positions.iter().find(|x| x.watched.partition == p).and_then(|x| x.translated);
                CanaryPartition {
                    partition: p,
                    stopped_at: stop,
                    resumed_at: resumed_at.map(|t| t.get()),
                    resumed: resumed(&done, &unread, reads.get(&p).map_or(&[][..], Vec::as_slice)),
                }
            })
            .collect()
    }
}

/// Whether `e` says a topic or partition is not known yet, as brokers answer for a topic
/// created a moment ago.
fn just_created(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::UnknownPartition
                | RDKafkaErrorCode::UnknownTopic
                | RDKafkaErrorCode::UnknownTopicOrPartition
        )
    )
}

/// A canary record's value (and key): unique to the drill, the partition and the record.
fn canary_value(run: i64, partition: i32, i: i64) -> String {
    format!("strait-drill {run} {partition} {i}")
}

/// Creates the canary topic if needed and writes this drill's records to every partition;
/// returns the first offset of each partition's stretch and the partition count.
fn write_canary(view: &FlowView, options: &DrillOptions, run: i64) -> Result<(BTreeMap<i32, i64>, i32), FlowError> {
    let canary = options.canary_topic.as_str();
    let source = view.source.alias.as_str();
    let admin = ClusterAdmin::connect(&view.source, &view.flow.source_admin)?;
    admin.ensure_exists(&TopicSpec {
        name: canary.into(),
        partitions: options.partitions,
        replication_factor: -1,
        configs: Vec::new(),
    })?;
    let partitions = admin.partition_counts()?.get(canary).copied().unwrap_or(options.partitions);
    let reader: BaseConsumer = create_client(
        &view.source,
        &view.flow.consumer,
        "consumer",
        &[],
        crate::cluster::ASSIGN_ONLY_CONSUMER,
        DefaultConsumerContext,
    )?;
    let deadline = Instant::now() + options.timeout;
    let end = |p: i32| loop {
        match reader.fetch_watermarks(canary, p, options.timeout) {
            Ok((_, high)) => return Ok(high),
            // A topic just created reaches every broker's metadata a moment later.
            Err(e) if just_created(&e) && Instant::now() < deadline => std::thread::sleep(RELOAD),
            Err(e) => return Err(drill_error(source, format!("reading the end of {canary}-{p}: {e}"))),
        }
    };
    let starts: BTreeMap<i32, i64> = (0..partitions).map(|p| Ok((p, end(p)?))).collect::<Result<_, FlowError>>()?;
    let producer: ThreadedProducer<DefaultProducerContext> = create_client(
        &view.source,
        &view.flow.source_producer,
        "producer",
        &[],
        &[("acks", "all"), ("enable.idempotence", "true"), ("linger.ms", "5")],
        DefaultProducerContext,
    )?;
    for p in 0..partitions {
        for i in 0..options.records {
            let value = canary_value(run, p, i);
            let mut record = BaseRecord::to(canary).partition(p).key(&value).payload(&value);
            // A full queue waits for deliveries instead of failing the drill.
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((e, back)) => {
                        if !matches!(e.rdkafka_error_code(), Some(rdkafka::types::RDKafkaErrorCode::QueueFull)) {
                            return Err(drill_error(source, format!("writing to {canary}-{p}: {e}")));
                        }
                        record = back;
                        producer.poll(Duration::from_millis(50));
                    }
                }
            }
        }
    }
    producer.flush(options.timeout).map_err(|e| drill_error(source, format!("writing to {canary}: {e}")))?;
    for (&p, &start) in &starts {
        if end(p)? != start + options.records {
            return Err(drill_error(
                source,
                format!("{canary}-{p} grew by other writers during the drill; give --canary-topic a topic only drills write"),
            ));
        }
    }
    Ok((starts, partitions))
}

/// Reads the flow's positions again until its mapping covers every canary partition up to the
/// group's stop, then plans the group's failover there. Translating earlier would send the group
/// to where the next replicated record lands, before its stop: it would read records twice.
fn wait_for_translation(
    view: &mut FlowView,
    group: &str,
    stops: &BTreeMap<i32, i64>,
    timeout: Duration,
) -> Result<FailoverPlan, FlowError> {
    let deadline = Instant::now() + timeout;
    loop {
        let rows = translate_groups(view, &[group.to_string()])?.pop().map(|(_, rows)| rows).unwrap_or_default();
        let ready = stops.iter().all(|(&p, &stop)| {
            rows.iter().any(|r| {
                r.watched.partition == p
                    && !r.watched.back
                    && r.translated.is_some()
                    && view
                        .translation
                        .forward
                        .get(&r.watched.source_topic, p)
                        .and_then(|m| m.next())
                        .is_some_and(|next| next.get() >= stop)
            })
        });
        if ready {
            let plan = FailoverPlan {
                group: group.to_string(),
                positions: rows,
                lags: Vec::new(),
                source_reachable: view.source_reachable,
            };
            return Ok(plan);
        }
        if Instant::now() > deadline {
            return Err(drill_error(
                view.source.alias.as_str(),
                format!(
                    "the flow did not replicate the canary records up to the group's stop within {}s; is strait running \
                     {}? (`strait status`)",
                    timeout.as_secs(),
                    view.name
                ),
            ));
        }
        std::thread::sleep(RELOAD);
        view.read_positions()?;
    }
}

/// Resumes `group` on `remote` from its committed positions and reads until every partition gave
/// `expected` records (or the timeout): the values read per partition, in order, and when the
/// first record arrived.
fn resume_on_target(
    view: &FlowView,
    remote: &str,
    group: &str,
    partitions: i32,
    expected: i64,
    timeout: Duration,
) -> Result<ReadOnTarget, FlowError> {
    let target = view.target.alias.as_str();
    let consumer: BaseConsumer = create_client(
        &view.target,
        &view.flow.target_admin,
        "consumer",
        &[],
        &[
            ("group.id", group),
            ("enable.auto.commit", "false"),
            ("enable.partition.eof", "false"),
            ("isolation.level", "read_committed"),
            // A group without a position would start at the beginning: the drill reports that
            // as records read twice rather than hide it.
            ("auto.offset.reset", "earliest"),
        ],
        DefaultConsumerContext,
    )?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(remote, p, Offset::Stored)
            .map_err(|e| drill_error(target, format!("assigning {remote}-{p}: {e}")))?;
    }
    consumer.assign(&tpl).map_err(|e| drill_error(target, format!("assigning {remote}: {e}")))?;
    let mut reads: HashMap<i32, Vec<String>> = HashMap::new();
    let mut first = None;
    let deadline = Instant::now() + timeout;
    let complete = |reads: &HashMap<i32, Vec<String>>| {
        (0..partitions).all(|p| reads.get(&p).map_or(0, Vec::len) as i64 >= expected)
    };
    while !complete(&reads) && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                first.get_or_insert_with(Instant::now);
                let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
                reads.entry(m.partition()).or_default().push(value);
            }
            Some(Err(e)) => return Err(drill_error(target, format!("reading {remote}: {e}"))),
            None => {}
        }
    }
    Ok(ReadOnTarget { reads, first })
}

/// What the canary group read on the target: values per partition in order, and when the
/// first arrived.
struct ReadOnTarget {
    reads: HashMap<i32, Vec<String>>,
    first: Option<Instant>,
}

/// [`verify_flow`] over the canary records from `starts` on, once the flow has stored positions
/// past all of them (or the timeout: the report then covers what was stored).
fn verify_window(
    view: &mut FlowView,
    canary: &str,
    starts: &BTreeMap<i32, i64>,
    options: &DrillOptions,
) -> Result<VerifyReport, FlowError> {
    let verify = VerifyOptions {
        topics: regex::Regex::new(&format!("^{}$", regex::escape(canary))).ok(),
        from: starts.values().min().copied().map(Bound::Offset),
        ..VerifyOptions::default()
    };
    let wanted = starts.len() as u64 * options.records as u64;
    let deadline = Instant::now() + options.timeout;
    loop {
        view.read_positions()?;
        let report = verify_flow(view, &verify, |_| {})?;
        if report.total.expected >= wanted || Instant::now() > deadline {
            return Ok(report);
        }
        std::thread::sleep(RELOAD);
    }
}
