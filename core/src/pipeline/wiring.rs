//! Threads and channels: starts every stage of a flow and every flow of a config.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use rdkafka::consumer::DefaultConsumerContext;
use rdkafka::consumer::BaseConsumer;
use rdkafka::producer::BaseProducer;

use super::fetch::FetchStage;
use super::filter::{KeepAll, RecordFilter};
use super::produce::{DeliveryContext, OffsetSyncSink, ProduceStage};
use super::stage::run_batches;
use super::transform::{RecordTransform, Unchanged};
use super::{FlowError, Slots};
use crate::cluster::{check_reachable, create_client, ClusterAdmin, ClusterError, REACH_TIMEOUT};
use crate::cluster::TopicSpec;
use crate::config::{Config, FlowConfig, SyncLocation};
use rdkafka::producer::{DefaultProducerContext, ThreadedProducer};
use crate::events::PositionsLoaded;
use crate::heartbeats::HeartbeatEmitter;
use crate::checkpoints::{CheckpointTask, Groups};
use crate::offsets::mm2::Checkpoint;
use crate::offsets::store::{load_positions, positions_topic, read_topic, TopicTail};
use crate::policy::{FlowPolicy, PolicyEngine, RecordHook, ReplicationPolicy, WasmNaming};
use crate::topics::Discovery;

/// Consumer settings strait chooses unless the operator sets them: small prefetch queues so
/// memory stays bounded however many partitions are assigned.
const CONSUMER_DEFAULTS: &[(&str, &str)] = &[("queued.max.messages.kbytes", "8192"), ("fetch.wait.max.ms", "100")];
/// Consumer settings that keep the delivery guarantee; the operator cannot change them.
/// librdkafka requires a `group.id` even for assigned partitions; strait never joins or
/// commits it, positions live in the position topic.
const CONSUMER_FORCED: &[(&str, &str)] = &[
    ("group.id", "strait"),
    ("enable.auto.commit", "false"),
    ("enable.auto.offset.store", "false"),
    ("auto.offset.reset", "earliest"),
    ("enable.partition.eof", "false"),
    ("isolation.level", "read_committed"),
];
/// Producer settings strait chooses unless the operator sets them. `message.timeout.ms = 0`
/// waits for an unavailable target forever, as Kafka Connect's producer does, instead of
/// failing records; the bounded queue turns that wait into back-pressure.
const PRODUCER_DEFAULTS: &[(&str, &str)] = &[
    ("message.timeout.ms", "0"),
    ("linger.ms", "5"),
    ("queue.buffering.max.kbytes", "65536"),
    ("queue.buffering.max.messages", "100000"),
];
/// Producer settings that keep order and the delivery guarantee.
const PRODUCER_FORCED: &[(&str, &str)] = &[("enable.idempotence", "true"), ("acks", "all")];

/// Runs every flow of `config` until `stop` is set or one fails; on failure the others are
/// stopped too, so a supervisor sees one exit with the cause.
pub fn run(config: &Config, stop: Arc<AtomicBool>) -> Result<(), FlowError> {
    let mut handles = Vec::new();
    for flow in &config.flows {
        let (config, flow, stop) = (config.clone(), flow.clone(), stop.clone());
        let name = flow.name();
        let handle = thread::Builder::new()
            .name(format!("flow {name}"))
            .spawn(move || {
                let result = run_flow(&config, &flow, stop.clone());
                if result.is_err() {
                    stop.store(true, Ordering::Relaxed);
                }
                result
            })
            .map_err(|e| FlowError::Thread { flow: name.clone(), stage: "flow", what: format!("could not start: {e}") })?;
        handles.push((name, handle));
    }
    let mut first_error = None;
    for (name, handle) in handles {
        let result = join(handle, &name, "flow").and_then(|r| r);
        if let Err(e) = result {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Runs one flow until `stop` is set or the target refuses a record.
pub fn run_flow(config: &Config, flow: &FlowConfig, stop: Arc<AtomicBool>) -> Result<(), FlowError> {
    let name = flow.name();
    let missing = |alias: &str| ClusterError::Client { alias: alias.into(), what: "looking up the cluster".into(), reason: "not in `clusters`".into() };
    let source = config.cluster(&flow.source).ok_or_else(|| missing(flow.source.as_str()))?;
    let target = config.cluster(&flow.target).ok_or_else(|| missing(flow.target.as_str()))?;

    // A broken policy is found before any cluster is touched.
    let policy = FlowPolicy::load(PolicyEngine::shared()?, flow)?;
    let source_admin = ClusterAdmin::connect(source, &flow.source_admin)?;
    check_reachable(source_admin.client(), source, REACH_TIMEOUT)?;
    let target_admin = ClusterAdmin::connect(target, &flow.target_admin)?;
    check_reachable(target_admin.client(), target, REACH_TIMEOUT)?;

    let positions = load_positions(target, &flow.target_admin, &target_admin, source.alias.as_str(), flow.offset_storage_replication_factor, REACH_TIMEOUT * 4)?;
    PositionsLoaded { flow: &name, topic: &positions_topic(source.alias.as_str()), partitions: positions.len() }.emit();

    let slots = Slots::default();
    let consumer: BaseConsumer = create_client(source, &flow.consumer, "consumer", CONSUMER_DEFAULTS, CONSUMER_FORCED, DefaultConsumerContext)?;
    let producer: BaseProducer<DeliveryContext> =
        create_client(target, &flow.producer, "producer", PRODUCER_DEFAULTS, PRODUCER_FORCED, DeliveryContext::new(slots.clone(), flow.offset_syncs.map(|c| c.max_lag)))?;

    let naming: Box<dyn ReplicationPolicy> = Box::new(WasmNaming::new(policy.naming.instantiate(flow)?));
    let mut filter: Box<dyn RecordFilter> = match &policy.records {
        Some(component) => Box::new(RecordHook::new(component.instantiate(flow)?, slots.clone()).reloading(flow)),
        None => Box::new(KeepAll),
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
            let producer: ThreadedProducer<DefaultProducerContext> =
                create_client(cluster, settings, "producer", &[("linger.ms", "5")], &[("acks", "all")], DefaultProducerContext)?;
            Some(OffsetSyncSink { producer, topic })
        }
    };

    let heartbeats = match flow.heartbeats {
        None => None,
        Some(interval) => {
            let topic = naming.heartbeats_topic()?;
            target_admin.ensure_exists(&TopicSpec::compacted_single(topic.clone(), flow.heartbeats_replication_factor))?;
            let producer: ThreadedProducer<DefaultProducerContext> =
                create_client(target, &flow.producer, "producer", &[], &[("acks", "all")], DefaultProducerContext)?;
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
            let producer: ThreadedProducer<DefaultProducerContext> =
                create_client(target, &flow.producer, "producer", &[], &[("acks", "all")], DefaultProducerContext)?;
            Some(CheckpointTask {
                flow: name.clone(),
                source_alias: source.alias.to_string(),
                target_alias: target.alias.to_string(),
                config: cfg.clone(),
                topics: flow.topics.clone(),
                naming,
                source_groups: Groups::connect(source, &flow.consumer)?,
                target_groups: Groups::connect(target, &flow.target_admin)?,
                source: source.clone(),
                source_settings: flow.consumer.clone(),
                forward_tail: TopicTail::open(target, &flow.target_admin, &positions_topic(source.alias.as_str()))?,
                producer,
                topic,
                last,
            })
        }
    };

    let (assign_tx, assign_rx) = crossbeam_channel::unbounded();
    let mut discovery = Discovery::new(flow, naming, source_admin, target_admin, slots.clone(), positions, assign_tx);
    discovery.discover()?;

    let (fetched_tx, fetched_rx) = crossbeam_channel::bounded(flow.channel_capacity);
    let (filtered_tx, filtered_rx) = crossbeam_channel::bounded(flow.channel_capacity);
    let (transformed_tx, transformed_rx) = crossbeam_channel::bounded(flow.channel_capacity);

    type Stage = Box<dyn FnOnce() -> Result<(), FlowError> + Send>;
    let spawn = |stage: &'static str, f: Stage| -> Result<JoinHandle<Result<(), FlowError>>, FlowError> {
        thread::Builder::new()
            .name(format!("{stage} {name}"))
            .spawn(f)
            .map_err(|e| FlowError::Thread { flow: name.clone(), stage, what: format!("could not start: {e}") })
    };

    let mut helpers = Vec::new();
    if flow.refresh_topics {
        let (interval, stop) = (flow.refresh_interval, stop.clone());
        helpers.push((
            "discovery",
            spawn(
                "discovery",
                Box::new(move || {
                    discovery.run(interval, stop);
                    Ok(())
                }),
            )?,
        ));
    }
    if let Some(emitter) = heartbeats {
        let stop = stop.clone();
        helpers.push((
            "heartbeat",
            spawn(
                "heartbeat",
                Box::new(move || {
                    emitter.run(stop);
                    Ok(())
                }),
            )?,
        ));
    }
    if let Some(task) = checkpoints {
        let stop = stop.clone();
        helpers.push((
            "checkpoint",
            spawn(
                "checkpoint",
                Box::new(move || {
                    task.run(stop);
                    Ok(())
                }),
            )?,
        ));
    }
    let fetch = FetchStage {
        flow: name.clone(),
        consumer,
        assignments: assign_rx,
        output: fetched_tx,
        slots: slots.clone(),
        stop: stop.clone(),
        max_records: flow.batch_max_records,
        max_bytes: flow.batch_max_bytes,
    };
    helpers.push((
        "fetch",
        spawn(
            "fetch",
            Box::new(move || {
                fetch.run();
                Ok(())
            }),
        )?,
    ));
    let (flow_name, stage_stop) = (name.clone(), stop.clone());
    helpers.push((
        "filter",
        spawn(
            "filter",
            Box::new(move || Ok(run_batches(&flow_name, "transform", fetched_rx, filtered_tx, &stage_stop, |b| filter.filter(b))?)),
        )?,
    ));
    let (flow_name, stage_stop, mut transform) = (name.clone(), stop.clone(), Box::new(Unchanged) as Box<dyn RecordTransform>);
    helpers.push((
        "transform",
        spawn(
            "transform",
            Box::new(move || {
                Ok(run_batches(&flow_name, "produce", filtered_rx, transformed_tx, &stage_stop, |b| {
                    transform.transform(b);
                    Ok(())
                })?)
            }),
        )?,
    ));

    let produce = ProduceStage {
        flow: name.clone(),
        producer,
        input: transformed_rx,
        slots,
        positions_topic: positions_topic(source.alias.as_str()),
        flush_interval: flow.offset_flush_interval,
        stop: stop.clone(),
        offset_syncs,
    };
    let result = produce.run();
    stop.store(true, Ordering::Relaxed);
    let mut first_error = result.err();
    for (stage, handle) in helpers {
        if let Err(e) = join(handle, &name, stage).and_then(|r| r) {
            // A stage that failed is the cause; the produce stage only saw its channel close.
            first_error = Some(first_error.map_or(e, |earlier| earlier));
        }
    }
    first_error.map_or(Ok(()), Err)
}

fn join<T>(handle: JoinHandle<T>, flow: &str, stage: &'static str) -> Result<T, FlowError> {
    handle.join().map_err(|_| FlowError::Thread { flow: flow.into(), stage, what: "panicked".into() })
}
