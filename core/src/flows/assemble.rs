//! The composition root: assembles one flow from its config — clients, stages, channels and the
//! periodic parts — for the supervisor to start. Nothing below it imports it.

use std::sync::{Arc, Mutex};

use rdkafka::consumer::BaseConsumer;

use super::FlowError;
use crate::active_active::{provenance, ActiveActive, Conflicts, KeyStates};
use crate::checkpoints::{CheckpointClients, CheckpointTask, Groups};
use crate::cluster::{
    check_reachable, AdminConnection, ClusterAdmin, ClusterError, PerCluster, PolledProducer, TopicSpec, REACH_TIMEOUT,
};
use crate::config::{ClientSettings, ClusterAlias, ClusterConfig, Config, FlowConfig};
use crate::events::{AssignmentChanged, PositionsLoaded};
use crate::group::{group_id, GroupSession, Tasks};
use crate::heartbeats::HeartbeatEmitter;
use crate::offsets::store::{end_reader, load_positions, tail_reader, Positions, TopicTail};
use crate::pipeline::RecordHook;
use crate::pipeline::{
    ApplyEdits, Deliveries, Doorbell, FetchStage, FlowControl, KeepAll, Lanes, MiddleStage, Neighbours, OffsetSyncSink,
    Periodic, PositionWriter, ProduceStage, RecordFilter, RecordTransform, Slots, StageError, StageTask, Unchanged,
};
use crate::policy::{FlowPolicy, PolicyEngine, ReplicationPolicy, RouteGuard};
use crate::schemas::{IdTable, Registry, SchemaIds, SchemaWorker};
use crate::site::Site;
use crate::topics::{Discovery, TopicSync};

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

    /// The clients `site`'s checkpoint rounds read groups and positions through.
    fn checkpoint_clients(&self, site: &Site<'_>) -> Result<CheckpointClients, ClusterError> {
        let (source, target, flow) = (site.source, site.target, site.flow);
        let stop = Some(site.stop.clone());
        Ok(CheckpointClients {
            source_groups: self.groups(source, &flow.consumer)?,
            target_groups: self.groups(target, &flow.target_admin)?,
            forward_tail: self.tail(target, &flow.target_admin, &flow.positions_topic)?.abandon_when(stop.clone()),
            back_tail: self.tail(source, &flow.consumer, &flow.back_positions_topic)?.abandon_when(stop),
        })
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
/// is the member that owns `tasks`. Each part builds itself from the flow's [`Site`].
pub fn build_flow(
    config: &Config,
    flow: &FlowConfig,
    tasks: &Tasks,
    session: Option<&Arc<GroupSession>>,
    shared: &Shared,
    control: &Arc<FlowControl>,
) -> Result<FlowParts, FlowError> {
    let (source, target) = clusters(config, flow)?;
    // A broken policy is found before any cluster is touched.
    let policy = FlowPolicy::load(PolicyEngine::shared()?, flow)?;
    let source_admin = reach(shared, source, &flow.source_admin)?;
    let target_admin = reach(shared, target, &flow.target_admin)?;
    let site = Site {
        flow,
        name: flow.name(),
        source,
        target,
        source_admin,
        target_admin,
        tasks,
        filters: policy.filters(flow)?,
        policy: &policy,
        producers: &shared.producers,
        stop: control.stop_flag(),
    };

    // The producers come first: in exactly-once mode their `init_transactions` fences the
    // tasks' previous owners and aborts what they left open, so the positions read next are
    // final for every owned partition.
    let deliveries = Deliveries::new(flow.offset_syncs.map(|c| c.max_lag));
    let (lanes, position_writer) = Lanes::for_flow(&site, &group_id(flow), session, &deliveries)?;
    let positions = positions(&site)?;
    let slots = Slots::default();
    let (assign_tx, assign_rx) = crossbeam_channel::unbounded();
    let fetch = FetchStage::for_flow(&site, slots.clone(), assign_rx)?;
    let naming = site.naming()?;
    let records = record_stages(&site, naming.as_ref(), &slots, &shared.keys)?;
    let offset_syncs = OffsetSyncSink::for_flow(&site, naming.as_ref())?;
    let heartbeats = HeartbeatEmitter::for_flow(&site, naming.as_ref())?;
    let checkpoints = CheckpointTask::for_flow(&site, || shared.checkpoint_clients(&site))?;
    let discovery = Discovery::for_flow(&site, naming, slots.clone(), positions, assign_tx, start_from_latest(flow)?)?;
    let topic_sync = TopicSync::for_flow(&site, discovery.replicated());
    // A start that owns no partition must not show the last start's count.
    AssignmentChanged { flow: &site.name, added: 0, total: 0 }.emit();

    let mut periodic: Vec<Box<dyn Periodic>> = Vec::new();
    if flow.refresh_topics {
        periodic.push(Box::new(discovery.ticker(flow.refresh_interval)));
    }
    periodic.extend(heartbeats.map(|h| Box::new(h.ticker()) as Box<dyn Periodic>));
    periodic.extend(topic_sync.map(|t| Box::new(t) as Box<dyn Periodic>));
    let target = Target { lanes, deliveries, position_writer, offset_syncs };
    Ok(FlowParts {
        stages: stages(&site, control, fetch, records, target, slots),
        periodic,
        checkpoints: checkpoints.into_iter().map(|task| Box::new(task.ticker()) as Box<dyn Periodic>).collect(),
    })
}

/// The flow's two clusters, from `clusters`.
fn clusters<'a>(config: &'a Config, flow: &FlowConfig) -> Result<(&'a ClusterConfig, &'a ClusterConfig), ClusterError> {
    let find = |alias: &ClusterAlias| {
        config.cluster(alias).ok_or_else(|| ClusterError::Client {
            alias: alias.to_string(),
            what: "looking up the cluster".into(),
            reason: "not in `clusters`".into(),
        })
    };
    Ok((find(&flow.source)?, find(&flow.target)?))
}

/// The shared admin client of `cluster`, once the cluster answered.
fn reach(
    shared: &Shared,
    cluster: &ClusterConfig,
    settings: &ClientSettings,
) -> Result<Arc<ClusterAdmin>, ClusterError> {
    let admin = shared.admins.admin(cluster, settings)?;
    check_reachable(&admin, cluster, REACH_TIMEOUT)?;
    Ok(admin)
}

/// Where the flow's partitions resume: the positions stored on the target.
fn positions(site: &Site<'_>) -> Result<Positions, ClusterError> {
    let positions = load_positions(
        site.target,
        &site.flow.target_admin,
        &site.target_admin,
        &site.flow.positions_topic,
        site.flow.offset_storage_replication_factor,
        REACH_TIMEOUT * 4,
    )?;
    PositionsLoaded { flow: &site.name, topic: &site.flow.positions_topic, partitions: positions.len() }.emit();
    Ok(positions)
}

/// The filter and transform stages' work: loop prevention and conflict resolution
/// (active-active), and the policy's record hook with the edits it makes.
fn record_stages(
    site: &Site<'_>,
    naming: &dyn ReplicationPolicy,
    slots: &Slots,
    keys: &Arc<KeyStates>,
) -> Result<RecordStages, FlowError> {
    let (flow, source, target) = (site.flow, site.source.alias.as_str(), site.target.alias.as_str());
    let mut filters: Vec<Box<dyn RecordFilter>> = Vec::new();
    let provenance = provenance::enabled(flow, naming)?;
    let conflicts = conflicts(site, keys)?;
    if provenance || conflicts.is_some() {
        filters.push(Box::new(ActiveActive::new(source, target, slots.clone(), provenance, conflicts)));
    }
    let mut transform: Box<dyn RecordTransform> = Box::new(Unchanged);
    if let Some(component) = &site.policy.records {
        let reserved = [
            flow.positions_topic.clone(),
            naming.offset_syncs_topic(source)?,
            naming.offset_syncs_topic(target)?,
            naming.checkpoints_topic(source)?,
            naming.checkpoints_topic(target)?,
        ];
        let guard = RouteGuard::new(site.naming()?, reserved)?;
        filters
            .push(Box::new(RecordHook::new(component.instantiate(flow)?, slots.clone(), &site.name).reloading(flow)));
        transform = Box::new(ApplyEdits::new(component.name(), guard));
    }
    if let Some(ids) = schema_ids(site)? {
        transform = Box::new(vec![transform, ids]);
    }
    let filter: Box<dyn RecordFilter> = match filters.len() {
        0 => Box::new(KeepAll),
        1 => filters.remove(0),
        _ => Box::new(filters),
    };
    Ok(RecordStages { filter, transform })
}

/// The transform that carries schema ids across, when both clusters name a registry, and its
/// worker on a thread of its own, which ends when the transform is dropped with the flow.
fn schema_ids(site: &Site<'_>) -> Result<Option<Box<dyn RecordTransform>>, FlowError> {
    let Some(config) = site.flow.schemas.clone() else { return Ok(None) };
    let (source, target) = (site.source.alias.as_str(), site.target.alias.as_str());
    let table = Arc::new(IdTable::default());
    let (wanted_tx, wanted_rx) = crossbeam_channel::unbounded();
    let admin = site.source_admin.clone();
    let worker = SchemaWorker {
        flow: site.name.clone(),
        source_alias: source.to_string(),
        source: Registry::new(source, &config.source)?,
        target: Registry::new(target, &config.target)?,
        naming: site.naming()?,
        topics: site.flow.topics.clone(),
        filters: site.filters.clone(),
        source_topics: Box::new(move || {
            admin.partition_counts().map(|c| c.into_keys().collect()).map_err(|e| e.to_string())
        }),
        table: table.clone(),
        config: config.clone(),
    };
    let stop = site.stop.clone();
    std::thread::Builder::new()
        .name(format!("schemas {}", site.name))
        .spawn(move || worker.run(wanted_rx, stop))
        .map_err(|e| StageError::Thread {
            flow: site.name.clone(),
            stage: "schemas",
            what: format!("cannot start: {e}"),
        })?;
    Ok(Some(Box::new(SchemaIds::new(&site.name, source, config.ids, config.strict, table, wanted_tx))))
}

/// The filter and transform stages' work.
struct RecordStages {
    filter: Box<dyn RecordFilter>,
    transform: Box<dyn RecordTransform>,
}

/// Active-active conflict resolution, when the policy has a `conflicts` hook: refused records go
/// to the dead-letter topic if one is set.
fn conflicts(site: &Site<'_>, keys: &Arc<KeyStates>) -> Result<Option<Conflicts>, FlowError> {
    let Some(component) = &site.policy.conflicts else { return Ok(None) };
    // A broken component is found before the target is touched.
    let instance = component.instantiate(site.flow)?;
    let dead_letter = match &site.flow.dead_letter_topic {
        Some(topic) => {
            // One partition keeps refused records in the order they were refused.
            let spec = TopicSpec {
                name: topic.clone(),
                partitions: 1,
                replication_factor: site.flow.replication_factor,
                configs: Vec::new(),
            };
            site.target_admin.ensure_exists(&spec)?;
            Some(Arc::from(topic.as_str()))
        }
        None => None,
    };
    Ok(Some(Conflicts { instance, keys: keys.clone(), dead_letter }))
}

/// What the produce stage writes through.
struct Target {
    lanes: Lanes,
    deliveries: Arc<Deliveries>,
    position_writer: Option<PositionWriter>,
    offset_syncs: Option<OffsetSyncSink>,
}

/// The four stages in pipeline order, joined by bounded channels of batches, each with its
/// doorbell.
fn stages(
    site: &Site<'_>,
    control: &Arc<FlowControl>,
    fetch: FetchStage,
    records: RecordStages,
    target: Target,
    slots: Slots,
) -> Vec<(Box<dyn StageTask>, Doorbell)> {
    let (flow, name) = (site.flow, &site.name);
    let (fetched_tx, fetched_rx) = crossbeam_channel::bounded(flow.channel_capacity);
    let (filtered_tx, filtered_rx) = crossbeam_channel::bounded(flow.channel_capacity);
    let (transformed_tx, transformed_rx) = crossbeam_channel::bounded(flow.channel_capacity);
    let [fetch_bell, filter_bell, transform_bell, produce_bell] = std::array::from_fn(|_| Doorbell::default());
    let filter = MiddleStage::new(
        name,
        "transform",
        fetched_rx,
        filtered_tx,
        Box::new(records.filter),
        Neighbours { before: fetch_bell.clone(), after: transform_bell.clone() },
    );
    let transform = MiddleStage::new(
        name,
        "produce",
        filtered_rx,
        transformed_tx,
        Box::new(records.transform),
        Neighbours { before: filter_bell.clone(), after: produce_bell.clone() },
    );
    let produce = ProduceStage {
        flow: name.clone(),
        lanes: target.lanes,
        deliveries: target.deliveries,
        input: transformed_rx,
        before: transform_bell.clone(),
        slots,
        positions_topic: site.flow.positions_topic.clone(),
        flush_interval: if flow.exactly_once { flow.transaction_interval } else { flow.offset_flush_interval },
        control: control.clone(),
        offset_syncs: target.offset_syncs,
        position_writer: target.position_writer,
    };
    let fetch = fetch.task(fetched_tx, fetch_bell.clone(), filter_bell.clone());
    vec![
        (Box::new(fetch), fetch_bell),
        (Box::new(filter), filter_bell),
        (Box::new(transform), transform_bell),
        (Box::new(produce.task()), produce_bell),
    ]
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
