//! The composition root: assembles one flow from its config — clients, stages, channels and the
//! periodic parts — for the supervisor to start. Nothing below it imports it.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

use rdkafka::consumer::BaseConsumer;
use rdkafka::consumer::DefaultConsumerContext;
use rdkafka::producer::Producer;
use rdkafka::types::RDKafkaErrorCode;

use super::FlowError;
use crate::active_active::{ActiveActive, Conflicts, KeyStates};
use crate::checkpoints::{CheckpointTask, Groups};
use crate::cluster::TopicSpec;
use crate::cluster::{
    check_reachable, create_client, AdminConnection, ClusterError, ControlProducer, PerCluster, PolledProducer,
    ASSIGN_ONLY_CONSUMER, REACH_TIMEOUT,
};
use crate::config::{ClientSettings, ClusterConfig, Config, FlowConfig, SyncLocation};
use crate::events::{AssignmentChanged, PositionsLoaded};
use crate::group::{group_id, GroupSession, Tasks};
use crate::heartbeats::HeartbeatEmitter;
use crate::offsets::mm2::Checkpoint;
use crate::offsets::store::{end_reader, load_positions, positions_topic, read_topic, tail_reader, TopicTail};
use crate::pipeline::Doorbell;
use crate::pipeline::FetchStage;
use crate::pipeline::{
    transactional_id, Deliveries, DeliveryContext, Lanes, OffsetSyncSink, PositionWriter, ProduceStage, TargetProducer,
};
use crate::pipeline::{ApplyEdits, RecordTransform, Unchanged};
use crate::pipeline::{FlowControl, Periodic, StageTask};
use crate::pipeline::{KeepAll, RecordFilter};
use crate::pipeline::{MiddleStage, Neighbours};
use crate::pipeline::{Slots, StageError};
use crate::policy::{FlowPolicy, PolicyEngine, RecordHook, ReplicationPolicy, RouteGuard, WasmNaming};
use crate::topics::{Discovery, TopicSync};

/// Consumer settings strait chooses unless the operator sets them: small prefetch queues so
/// memory stays bounded however many partitions are assigned, and librdkafka's (and Kafka's)
/// 500 ms long poll of an idle source: the broker answers as soon as a record arrives, so a
/// shorter one adds no speed, only requests (100 ms made every idle flow send 10 a second per
/// source broker).
const CONSUMER_DEFAULTS: &[(&str, &str)] = &[
    ("queued.max.messages.kbytes", "8192"),
    ("fetch.wait.max.ms", "500"),
    ("fetch.queue.backoff.ms", "5"),
    ("queued.min.messages", "20000"),
];
/// Producer settings strait chooses unless the operator sets them. `message.timeout.ms = 0`
/// waits for an unavailable target forever, as Kafka Connect's producer does, instead of
/// failing records; the bounded queue turns that wait into back-pressure.
const PRODUCER_DEFAULTS: &[(&str, &str)] = &[
    ("message.timeout.ms", "0"),
    ("linger.ms", "5"),
    COMPRESSION,
    ("queue.buffering.max.kbytes", "16384"),
    ("queue.buffering.max.messages", "100000"),
];
/// The target producer's codec unless `<target>.producer.compression.type` says otherwise: lz4
/// cut JSON records' bytes on the wire by two thirds at no measurable producer CPU, and costs
/// half a microsecond a record on data it cannot shrink (`benches/codecs.sh`, RESULTS.md).
const COMPRESSION: (&str, &str) = ("compression.type", "lz4");
/// Producer settings that keep order and the delivery guarantee.
const PRODUCER_FORCED: &[(&str, &str)] = &[("enable.idempotence", "true"), ("acks", "all")];

/// What the flows of one process share.
#[derive(Default)]
pub struct Shared {
    /// What is known of keys on every cluster: a flow learns its target's own writes from the
    /// flow that reads the target.
    pub keys: Arc<KeyStates>,
    /// Producers of heartbeats, checkpoints and offset syncs, one per cluster and settings.
    pub producers: PerCluster<PolledProducer>,
    /// The clients that list and read groups in checkpoint rounds, one per cluster and
    /// settings, shared by the cluster's aliases.
    pub group_listers: PerCluster<BaseConsumer>,
    /// Admin clients (topic creation and discovery, config and ACL sync), one per cluster
    /// and settings, shared by the cluster's aliases.
    pub admins: PerCluster<AdminConnection>,
    /// The clients that find where position topics end for the checkpoint rounds' readers,
    /// one per cluster and settings.
    pub end_readers: PerCluster<BaseConsumer>,
    /// The clients the checkpoint rounds read position topics with, in turns (all rounds run on
    /// one thread), one per cluster and settings.
    pub tail_readers: PerCluster<Mutex<BaseConsumer>>,
}

impl Shared {
    /// A reader of `topic` on `cluster` through the clients its flows' checkpoint rounds share.
    pub fn tail(
        &self,
        cluster: &ClusterConfig,
        settings: &ClientSettings,
        topic: &str,
    ) -> Result<TopicTail, ClusterError> {
        let reader = self.tail_readers.get(cluster, settings, || tail_reader(cluster, settings))?;
        let ends = self.end_readers.get(cluster, settings, || end_reader(cluster, settings))?;
        Ok(TopicTail::shared(cluster, topic, reader, ends))
    }

    /// Group operations on `cluster`, through the lister its aliases share.
    fn groups(&self, cluster: &ClusterConfig, settings: &ClientSettings) -> Result<Arc<Groups>, ClusterError> {
        let lister = self.group_listers.get(cluster, settings, || Groups::lister(cluster, settings))?;
        Ok(Arc::new(Groups::over(cluster, settings, lister)))
    }

    /// Forgets the shared admin clients of `flow`'s clusters, after it failed to start: a client
    /// that lived through an outage may not come back (after its cluster's only broker was
    /// frozen a minute, one could not reach it for minutes while new clients did at once). The
    /// next attempt makes new ones.
    pub fn forget_admins(&self, config: &Config, flow: &FlowConfig) {
        for (alias, settings) in [(&flow.source, &flow.source_admin), (&flow.target, &flow.target_admin)] {
            if let Some(cluster) = config.cluster(alias) {
                self.admins.forget(cluster, settings);
                self.end_readers.forget(cluster, settings);
                self.tail_readers.forget(cluster, settings);
            }
        }
        if let Some(source) = config.cluster(&flow.source) {
            self.end_readers.forget(source, &flow.consumer);
            self.tail_readers.forget(source, &flow.consumer);
        }
    }
}

/// A flow ready to run: its four stages, in pipeline order, and its periodic work.
pub struct FlowParts {
    /// Fetch, filter, transform, produce, each with its doorbell.
    pub stages: Vec<(Box<dyn StageTask>, Doorbell)>,
    /// Topic discovery and heartbeats.
    pub periodic: Vec<Box<dyn Periodic>>,
    /// Checkpoints and group offset sync.
    pub checkpoints: Vec<Box<dyn Periodic>>,
}

/// Connects one flow, loads its positions and policy, and prepares its stages for the partitions
/// of `tasks`; the owner of task 0 also does the flow's heartbeats and checkpoints. With
/// `session`, the flow's membership in its group, positions are stored only while this process
/// is the member that owns `tasks`.
pub fn build_flow(
    config: &Config,
    flow: &FlowConfig,
    tasks: &Tasks,
    session: Option<&Arc<GroupSession>>,
    shared: &Shared,
    control: &Arc<FlowControl>,
) -> Result<FlowParts, FlowError> {
    let producers = &shared.producers;
    let name = flow.name();
    let missing = |alias: &str| ClusterError::Client {
        alias: alias.into(),
        what: "looking up the cluster".into(),
        reason: "not in `clusters`".into(),
    };
    let source = config.cluster(&flow.source).ok_or_else(|| missing(flow.source.as_str()))?;
    let target = config.cluster(&flow.target).ok_or_else(|| missing(flow.target.as_str()))?;

    // A broken policy is found before any cluster is touched.
    let policy = FlowPolicy::load(PolicyEngine::shared()?, flow)?;
    let source_admin = shared.admins.admin(source, &flow.source_admin)?;
    check_reachable(&source_admin, source, REACH_TIMEOUT)?;
    let target_admin = shared.admins.admin(target, &flow.target_admin)?;
    check_reachable(&target_admin, target, REACH_TIMEOUT)?;
    let policy_filters = policy.filters(flow)?;

    // The producers come first: in exactly-once mode their `init_transactions` fences the
    // tasks' previous owners and aborts what they left open, so the positions read next are
    // final for every owned partition.
    let deliveries = Deliveries::new(flow.offset_syncs.map(|c| c.max_lag));
    let (lanes, position_writer) =
        target_producers(target, flow, &group_id(config, flow), tasks, session, &deliveries)?;
    let positions = load_positions(
        target,
        &flow.target_admin,
        &target_admin,
        source.alias.as_str(),
        flow.offset_storage_replication_factor,
        REACH_TIMEOUT * 4,
    )?;
    PositionsLoaded { flow: &name, topic: &positions_topic(source.alias.as_str()), partitions: positions.len() }.emit();

    let slots = Slots::default();
    let consumer: BaseConsumer = create_client(
        source,
        &flow.consumer,
        "consumer",
        CONSUMER_DEFAULTS,
        ASSIGN_ONLY_CONSUMER,
        DefaultConsumerContext,
    )?;

    let naming: Box<dyn ReplicationPolicy> = Box::new(WasmNaming::new(policy.naming.instantiate(flow)?));
    let mut filters: Vec<Box<dyn RecordFilter>> = Vec::new();
    // Names that stay the same cannot tell where a record came from; the header can.
    let provenance = match flow.provenance {
        Some(on) => on,
        None => naming.format_remote_topic(source.alias.as_str(), "strait-probe")? == "strait-probe",
    };
    let conflicts = match &policy.conflicts {
        Some(component) => Some(Conflicts {
            instance: component.instantiate(flow)?,
            keys: shared.keys.clone(),
            dead_letter: match &flow.dead_letter_topic {
                Some(topic) => {
                    // One partition keeps refused records in the order they were refused.
                    let spec = TopicSpec {
                        name: topic.clone(),
                        partitions: 1,
                        replication_factor: flow.replication_factor,
                        configs: Vec::new(),
                    };
                    target_admin.ensure_exists(&spec)?;
                    Some(Arc::from(topic.as_str()))
                }
                None => None,
            },
        }),
        None => None,
    };
    if provenance || conflicts.is_some() {
        filters.push(Box::new(ActiveActive::new(
            source.alias.as_str(),
            target.alias.as_str(),
            slots.clone(),
            provenance,
            conflicts,
        )));
    }
    let mut transform: Box<dyn RecordTransform> = Box::new(Unchanged);
    if let Some(component) = &policy.records {
        let (s, t) = (source.alias.as_str(), target.alias.as_str());
        let reserved = [
            positions_topic(s),
            naming.offset_syncs_topic(s)?,
            naming.offset_syncs_topic(t)?,
            naming.checkpoints_topic(s)?,
            naming.checkpoints_topic(t)?,
        ];
        let guard = RouteGuard::new(Box::new(WasmNaming::new(policy.naming.instantiate(flow)?)), reserved)?;
        filters.push(Box::new(RecordHook::new(component.instantiate(flow)?, slots.clone(), &name).reloading(flow)));
        transform = Box::new(ApplyEdits::new(component.name(), guard));
    }
    let filter: Box<dyn RecordFilter> = match filters.len() {
        0 => Box::new(KeepAll),
        1 => filters.remove(0),
        _ => Box::new(filters),
    };

    let offset_syncs = match flow.offset_syncs {
        None => None,
        Some(cfg) => {
            // MM2 names the topic after the other cluster of the flow.
            let (cluster, settings, admin, named_after) = match cfg.location {
                SyncLocation::Source => (source, &flow.source_producer, &source_admin, target.alias.as_str()),
                SyncLocation::Target => (target, &flow.producer, &target_admin, source.alias.as_str()),
            };
            let topic = naming.offset_syncs_topic(named_after)?;
            admin.ensure_exists(&TopicSpec::compacted_single(topic.clone(), cfg.replication_factor))?;
            Some(OffsetSyncSink { producer: producers.producer(cluster, settings)?, topic })
        }
    };

    let heartbeats = match flow.heartbeats {
        _ if !tasks.leads() => None,
        None => None,
        Some(interval) => {
            let topic = naming.heartbeats_topic()?;
            target_admin
                .ensure_exists(&TopicSpec::compacted_single(topic.clone(), flow.heartbeats_replication_factor))?;
            let producer: ControlProducer = producers.producer(target, &flow.producer)?;
            Some(HeartbeatEmitter {
                flow: name.clone(),
                producer,
                topic,
                source: source.alias.to_string(),
                target: target.alias.to_string(),
                interval,
            })
        }
    };

    let checkpoints = match &flow.checkpoints {
        _ if !tasks.leads() => None,
        None => None,
        Some(cfg) => {
            let naming: Box<dyn ReplicationPolicy> = Box::new(WasmNaming::new(policy.naming.instantiate(flow)?));
            let topic = naming.checkpoints_topic(source.alias.as_str())?;
            target_admin.ensure_exists(&TopicSpec::compacted_single(topic.clone(), cfg.replication_factor))?;
            // Read back so checkpoints stay monotonic across restarts.
            let mut last = HashMap::new();
            read_topic(target, &flow.target_admin, &topic, REACH_TIMEOUT * 4, |k, v| {
                if let Some(c) = v.and_then(|v| Checkpoint::decode(k, v)) {
                    last.insert((c.group.clone(), c.topic.clone(), c.partition), c);
                }
            })?;
            let producer: ControlProducer = producers.producer(target, &flow.producer)?;
            Some(CheckpointTask {
                flow: name.clone(),
                source_alias: source.alias.to_string(),
                target_alias: target.alias.to_string(),
                config: cfg.clone(),
                topics: flow.topics.clone(),
                filters: policy_filters.clone(),
                naming,
                source_groups: shared.groups(source, &flow.consumer)?,
                target_groups: shared.groups(target, &flow.target_admin)?,
                forward_tail: shared
                    .tail(target, &flow.target_admin, &positions_topic(source.alias.as_str()))?
                    .abandon_when(Some(control.stop_flag())),
                back_tail: shared
                    .tail(source, &flow.consumer, &positions_topic(target.alias.as_str()))?
                    .abandon_when(Some(control.stop_flag())),
                producer,
                topic,
                last,
            })
        }
    };

    let (assign_tx, assign_rx) = crossbeam_channel::unbounded();
    let from_latest = start_from_latest(flow)?;
    let mut discovery =
        Discovery::new(flow, naming, source_admin.clone(), target_admin.clone(), slots.clone(), positions, assign_tx)
            .from_latest(from_latest)
            .tasks(tasks.clone())
            .filters(policy_filters.clone());
    discovery.discover()?;
    // Configs and ACLs are the flow's, not a task's: the owner of task 0 keeps them in line.
    let topic_sync =
        (tasks.leads() && (flow.topic_configs.interval.is_some() || flow.acl_sync.is_some())).then(|| TopicSync {
            flow: name.clone(),
            source: source_admin.clone(),
            target: target_admin.clone(),
            replicated: discovery.replicated(),
            configs: flow.topic_configs.clone(),
            filters: policy_filters.clone(),
            acls: flow.acl_sync,
            next: (Instant::now() + flow.topic_configs.interval.unwrap_or_default(), Instant::now()),
        });

    // A start that owns no partition must not show the last start's count.
    AssignmentChanged { flow: &name, added: 0, total: 0 }.emit();
    let (fetched_tx, fetched_rx) = crossbeam_channel::bounded(flow.channel_capacity);
    let (filtered_tx, filtered_rx) = crossbeam_channel::bounded(flow.channel_capacity);
    let (transformed_tx, transformed_rx) = crossbeam_channel::bounded(flow.channel_capacity);

    let mut periodic: Vec<Box<dyn Periodic>> = Vec::new();
    if flow.refresh_topics {
        periodic.push(Box::new(discovery.ticker(flow.refresh_interval)));
    }
    if let Some(emitter) = heartbeats {
        periodic.push(Box::new(emitter.ticker()));
    }
    if let Some(sync) = topic_sync {
        periodic.push(Box::new(sync));
    }
    let checkpoints: Vec<Box<dyn Periodic>> =
        checkpoints.into_iter().map(|task| Box::new(task.ticker()) as Box<dyn Periodic>).collect();

    let fetch = FetchStage {
        flow: name.clone(),
        consumer,
        assignments: assign_rx,
        slots: slots.clone(),
        stop: control.stop_flag(),
        max_records: flow.batch_max_records,
        max_bytes: flow.batch_max_bytes,
    };
    let [fetch_bell, filter_bell, transform_bell, produce_bell] = std::array::from_fn(|_| Doorbell::default());
    let filter = MiddleStage::new(
        &name,
        "transform",
        fetched_rx,
        filtered_tx,
        Box::new(filter),
        Neighbours { before: fetch_bell.clone(), after: transform_bell.clone() },
    );
    let transform = MiddleStage::new(
        &name,
        "produce",
        filtered_rx,
        transformed_tx,
        Box::new(transform),
        Neighbours { before: filter_bell.clone(), after: produce_bell.clone() },
    );
    let produce = ProduceStage {
        flow: name.clone(),
        lanes,
        deliveries,
        input: transformed_rx,
        before: transform_bell.clone(),
        slots,
        positions_topic: positions_topic(source.alias.as_str()),
        flush_interval: if flow.exactly_once { flow.transaction_interval } else { flow.offset_flush_interval },
        control: control.clone(),
        offset_syncs,
        position_writer,
    };
    let fetch = fetch.task(fetched_tx, fetch_bell.clone(), filter_bell.clone());
    let stages: Vec<(Box<dyn StageTask>, Doorbell)> = vec![
        (Box::new(fetch), fetch_bell),
        (Box::new(filter), filter_bell),
        (Box::new(transform), transform_bell),
        (Box::new(produce.task()), produce_bell),
    ];
    Ok(FlowParts { stages, periodic, checkpoints })
}

/// The position writer's transaction timeout, which bounds how long one that a killed process
/// left open holds back readers of the position topic; librdkafka refuses record and socket
/// timeouts beyond it, so an operator's larger ones are lowered for this producer.
/// Ten seconds: a position transaction takes a fraction of a second, and one left open holds
/// back every process's checkpoints and every flow (re)starting on the target until it ends.
const POSITION_WRITER_TIMEOUTS: &[(&str, &str)] =
    &[("transaction.timeout.ms", "10000"), ("message.timeout.ms", "10000"), ("socket.timeout.ms", "10000")];

/// How long `init_transactions` may take: the coordinator first aborts what the task's previous
/// owner left open.
const INIT_TRANSACTIONS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The flow's producers on the target: one idempotent producer, or in exactly-once mode one
/// transactional producer per owned task, each past `init_transactions`. Their in-memory queues
/// share the single producer's budget, so exactly-once uses no more memory per flow.
fn target_producers(
    target: &ClusterConfig,
    flow: &FlowConfig,
    group: &str,
    tasks: &Tasks,
    session: Option<&Arc<GroupSession>>,
    deliveries: &Arc<Deliveries>,
) -> Result<(Lanes, Option<PositionWriter>), FlowError> {
    let init = |producer: &TargetProducer, id: &str| {
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
    };
    if !flow.exactly_once {
        let producer: TargetProducer = create_client(
            target,
            &flow.producer,
            "producer",
            PRODUCER_DEFAULTS,
            PRODUCER_FORCED,
            DeliveryContext::new(deliveries.clone()),
        )?;
        let lanes = Lanes::single(producer);
        let Some(session) = session else { return Ok((lanes, None)) };
        // The writer's id is named after the lowest task it owns. Every owned task's id is
        // initialised first: that aborts a position transaction a dead owner of the task left
        // open, which would hold back every reader of the position topic until it timed out.
        let writer = per_task(flow, &tasks.owned, |task| {
            let id = format!("{}.positions", transactional_id(group, tasks.count, task));
            let forced: Vec<(&str, &str)> = PRODUCER_FORCED
                .iter()
                .copied()
                .chain([("transactional.id", id.as_str())])
                .chain(POSITION_WRITER_TIMEOUTS.iter().copied())
                .collect();
            let producer: TargetProducer = create_client(
                target,
                &flow.producer,
                "producer",
                &[("linger.ms", "5")],
                &forced,
                DeliveryContext::new(deliveries.clone()),
            )?;
            init(&producer, &id)?;
            Ok(producer)
        })?
        .into_iter()
        .next()
        .map(|(_, producer)| producer);
        let Some(writer) = writer else { return Ok((lanes, None)) };
        let topic = positions_topic(flow.source.as_str());
        let writer =
            PositionWriter::start(&flow.name(), writer, topic, session.clone(), tasks.owned.clone()).map_err(|e| {
                StageError::Thread {
                    flow: flow.name(),
                    stage: "position writer",
                    what: format!("could not start: {e}"),
                }
            })?;
        return Ok((lanes, Some(writer)));
    }
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
    ];
    // The coordinator aborts a transaction older than its timeout, so it must well exceed the
    // commit interval; librdkafka refuses record and socket timeouts beyond it.
    let timeout =
        flow.transaction_interval.saturating_mul(3).max(std::time::Duration::from_secs(60)).as_millis().to_string();
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
            target,
            &flow.producer,
            "producer",
            &defaults,
            &forced,
            DeliveryContext::new(deliveries.clone()),
        )?;
        init(&producer, &id)?;
        Ok(producer)
    })?;
    Ok((Lanes::transactional(producers, tasks.count), None))
}

/// Makes one `T` per owned task side by side, a thread each, and returns them in task order, or
/// the first task's error. Each producer's `init_transactions` is a round trip to the
/// transaction coordinator, which first aborts what the task's previous owner left open: one
/// after another, the twelve of a default flow held its start back five seconds on loopback.
fn per_task<T: Send>(
    flow: &FlowConfig,
    owned: &BTreeSet<u32>,
    make: impl Fn(u32) -> Result<T, FlowError> + Sync,
) -> Result<Vec<(u32, T)>, FlowError> {
    let made: Vec<(u32, Result<T, FlowError>)> = thread::scope(|scope| {
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
                        Err(FlowError::from(StageError::Thread {
                            flow: flow.name(),
                            stage: "produce",
                            what: format!("initialising task {task}'s producer panicked"),
                        }))
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

/// `<source>.consumer.auto.offset.reset`: `latest` starts a partition with no stored position at
/// its end (MM2's `testReplicateFromLatest`); `earliest`, the default, at its beginning. A
/// stored position always wins, and a position past the log's end still resets to the beginning,
/// where nothing is skipped.
fn start_from_latest(flow: &FlowConfig) -> Result<bool, FlowError> {
    match flow.consumer.get("auto.offset.reset").map(|s| s.value.trim()) {
        None | Some("earliest") => Ok(false),
        Some("latest") => Ok(true),
        Some(other) => Err(StageError::Config {
            flow: flow.name(),
            key: format!("{}.consumer.auto.offset.reset", flow.source),
            reason: format!("is `{other}`; strait knows `earliest` (the default) and `latest`"),
        }
        .into()),
    }
}
