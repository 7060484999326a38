//! The flow's producers on the target, made from its settings: [`Lanes::for_flow`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rdkafka::producer::Producer;
use rdkafka::types::RDKafkaErrorCode;

use super::delivery::{Deliveries, DeliveryContext};
use super::lanes::{transactional_id, Lanes, TargetProducer};
use super::positions::PositionWriter;
use crate::cluster::{create_client, ClusterError, Link, WATCHED};
use crate::config::{ClusterConfig, FlowConfig};
use crate::group::GroupSession;
use crate::pipeline::StageError;
use crate::site::Site;

/// Producer settings strait chooses unless the operator sets them. `message.timeout.ms = 0`
/// waits for an unavailable target forever, as Kafka Connect's producer does, instead of
/// failing records; the bounded queue turns that wait into back-pressure.
const PRODUCER_DEFAULTS: &[(&str, &str)] = &[
    ("message.timeout.ms", "0"),
    ("linger.ms", "5"),
    COMPRESSION,
    ("queue.buffering.max.kbytes", "16384"),
    ("queue.buffering.max.messages", "100000"),
    WATCHED,
];
/// The target producer's codec unless `<target>.producer.compression.type` says otherwise: lz4
/// cut JSON records' bytes on the wire by two thirds at no measurable producer CPU, and costs
/// half a microsecond a record on data it cannot shrink (`benches/codecs.sh`, RESULTS.md).
const COMPRESSION: (&str, &str) = ("compression.type", "lz4");
/// Producer settings that keep order and the delivery guarantee.
const PRODUCER_FORCED: &[(&str, &str)] = &[("enable.idempotence", "true"), ("acks", "all")];

/// The position writer's transaction timeout, which bounds how long one that a killed process
/// left open holds back readers of the position topic; librdkafka refuses record and socket
/// timeouts beyond it, so an operator's larger ones are lowered for this producer.
/// Ten seconds: a position transaction takes a fraction of a second, and one left open holds
/// back every process's checkpoints and every flow (re)starting on the target until it ends.
const POSITION_WRITER_TIMEOUTS: &[(&str, &str)] =
    &[("transaction.timeout.ms", "10000"), ("message.timeout.ms", "10000"), ("socket.timeout.ms", "10000")];

/// How long `init_transactions` may take: the coordinator first aborts what the task's previous
/// owner left open.
const INIT_TRANSACTIONS_TIMEOUT: Duration = Duration::from_secs(60);

impl Lanes {
    /// The flow's producers on the target, each past `init_transactions` where it is
    /// transactional: one idempotent producer (and, in a group, the fenced position writer
    /// `session` needs), or in exactly-once mode one transactional producer per owned task.
    /// `group` names the flow's transactional ids ([`transactional_id`]).
    pub fn for_flow(
        site: &Site<'_>,
        group: &str,
        session: Option<&Arc<GroupSession>>,
        deliveries: &Arc<Deliveries>,
    ) -> Result<(Lanes, Option<PositionWriter>), StageError> {
        if site.flow.exactly_once {
            return Ok((transactional(site, group, deliveries)?, None));
        }
        let producer: TargetProducer = create_client(
            site.target,
            &site.flow.producer,
            "producer",
            PRODUCER_DEFAULTS,
            PRODUCER_FORCED,
            DeliveryContext::new(deliveries.clone(), Link::new(&site.name, site.target.alias.as_str(), "producer")),
        )?;
        let writer = match session {
            Some(session) => position_writer(site, group, session, deliveries)?,
            None => None,
        };
        Ok((Lanes::single(producer), writer))
    }
}

/// At-least-once in a group: the writer that stores positions in transactions fenced by the
/// membership. Its id is named after the lowest task it owns; every owned task's id is
/// initialised first, which aborts a position transaction a dead owner of the task left open
/// (it would hold back every reader of the position topic until it timed out).
fn position_writer(
    site: &Site<'_>,
    group: &str,
    session: &Arc<GroupSession>,
    deliveries: &Arc<Deliveries>,
) -> Result<Option<PositionWriter>, StageError> {
    let (flow, tasks) = (site.flow, site.tasks);
    let writer = per_task(flow, &tasks.owned, |task| {
        let id = format!("{}.positions", transactional_id(group, tasks.count, task));
        let forced: Vec<(&str, &str)> = PRODUCER_FORCED
            .iter()
            .copied()
            .chain([("transactional.id", id.as_str())])
            .chain(POSITION_WRITER_TIMEOUTS.iter().copied())
            .collect();
        let producer: TargetProducer = create_client(
            site.target,
            &flow.producer,
            "producer",
            &[("linger.ms", "5"), WATCHED],
            &forced,
            DeliveryContext::new(
                deliveries.clone(),
                Link::new(&site.name, site.target.alias.as_str(), "position writer"),
            ),
        )?;
        init_transactions(site.target, &producer, &id)?;
        Ok(producer)
    })?
    .into_iter()
    .next()
    .map(|(_, producer)| producer);
    let Some(writer) = writer else { return Ok(None) };
    let topic = flow.positions_topic.clone();
    let writer =
        PositionWriter::start(&site.name, writer, topic, session.clone(), tasks.owned.clone()).map_err(|e| {
            StageError::Thread {
                flow: site.name.clone(),
                stage: "position writer",
                what: format!("could not start: {e}"),
            }
        })?;
    Ok(Some(writer))
}

/// Exactly-once: one transactional producer per owned task. Their in-memory queues share the
/// single producer's budget, so exactly-once uses no more memory per flow.
fn transactional(site: &Site<'_>, group: &str, deliveries: &Arc<Deliveries>) -> Result<Lanes, StageError> {
    let (flow, tasks) = (site.flow, site.tasks);
    let share = tasks.owned.len().max(1);
    let kbytes = (16384 / share).max(1024).to_string();
    let messages = (100_000 / share).max(10_000).to_string();
    // A transactional producer may not wait forever on a record (`message.timeout.ms = 0`); it
    // waits out the transaction, and a timeout restarts the flow at its last commit.
    let defaults = [
        ("linger.ms", "5"),
        COMPRESSION,
        ("queue.buffering.max.kbytes", kbytes.as_str()),
        ("queue.buffering.max.messages", messages.as_str()),
        WATCHED,
    ];
    // The coordinator aborts a transaction older than its timeout, so it must well exceed the
    // commit interval; librdkafka refuses record and socket timeouts beyond it.
    let timeout = flow.transaction_interval.saturating_mul(3).max(Duration::from_secs(60)).as_millis().to_string();
    let timeouts = [
        ("transaction.timeout.ms", timeout.as_str()),
        ("message.timeout.ms", timeout.as_str()),
        ("socket.timeout.ms", "60000"),
    ];
    let producers = per_task(flow, &tasks.owned, |task| {
        let id = transactional_id(group, tasks.count, task);
        let forced: Vec<(&str, &str)> =
            PRODUCER_FORCED.iter().copied().chain([("transactional.id", id.as_str())]).chain(timeouts).collect();
        let producer: TargetProducer = create_client(
            site.target,
            &flow.producer,
            "producer",
            &defaults,
            &forced,
            DeliveryContext::new(deliveries.clone(), Link::new(&site.name, site.target.alias.as_str(), "producer")),
        )?;
        init_transactions(site.target, &producer, &id)?;
        Ok(producer)
    })?;
    Ok(Lanes::transactional(producers, tasks.count))
}

/// Initialises `producer`'s transactions as `id`, fencing whoever held the id before.
fn init_transactions(target: &ClusterConfig, producer: &TargetProducer, id: &str) -> Result<(), ClusterError> {
    producer.init_transactions(INIT_TRANSACTIONS_TIMEOUT).map_err(|e| ClusterError::Client {
        alias: target.alias.to_string(),
        what: format!("initialising transactions for `{id}`"),
        reason: match e.rdkafka_error_code() {
            Some(RDKafkaErrorCode::TransactionalIdAuthorizationFailed) => {
                format!("{e}; grant strait WRITE and DESCRIBE on the transactional id prefix `strait.`")
            }
            _ => e.to_string(),
        },
    })
}

/// Makes one `T` per owned task side by side, a thread each, and returns them in task order, or
/// the first task's error. Each producer's `init_transactions` is a round trip to the
/// transaction coordinator, which first aborts what the task's previous owner left open: one
/// after another, the twelve of a default flow held its start back five seconds on loopback.
fn per_task<T: Send>(
    flow: &FlowConfig,
    owned: &BTreeSet<u32>,
    make: impl Fn(u32) -> Result<T, StageError> + Sync,
) -> Result<Vec<(u32, T)>, StageError> {
    let made: Vec<(u32, Result<T, StageError>)> = thread::scope(|scope| {
        let make = &make;
        let running: Vec<_> = owned
            .iter()
            .map(|&task| {
                (task, thread::Builder::new().name(format!("init task {task}")).spawn_scoped(scope, move || make(task)))
            })
            .collect();
        running
            .into_iter()
            .map(|(task, spawned)| {
                let made = match spawned {
                    Ok(handle) => handle.join().unwrap_or_else(|_| {
                        Err(StageError::Thread {
                            flow: flow.name(),
                            stage: "produce",
                            what: format!("initialising task {task}'s producer panicked"),
                        })
                    }),
                    // No thread to spare: this one is made on the calling thread.
                    Err(_) => make(task),
                };
                (task, made)
            })
            .collect()
    });
    made.into_iter().map(|(task, made)| made.map(|t| (task, t))).collect()
}
