//! MM2's heartbeats: every `emit.heartbeats.interval.seconds` a record (source alias, target
//! alias, timestamp) goes to the `heartbeats` topic on the target. Replicated onward like any
//! topic (as `<alias>.heartbeats`), they show that a flow is alive and how far behind it is.

use std::time::{Duration, Instant};

use rdkafka::producer::BaseRecord;

use crate::clock::now_millis;
use crate::cluster::{ControlProducer, TopicSpec};
use crate::events::{FlowRetrying, HeartbeatSent};
use crate::offsets::mm2::Heartbeat;
use crate::pipeline::{Periodic, StageError};
use crate::policy::ReplicationPolicy;
use crate::site::Site;

/// Writes a flow's heartbeats until the flow stops.
pub struct HeartbeatEmitter {
    /// `source->target`.
    pub flow: String,
    /// A producer on the target cluster.
    pub producer: ControlProducer,
    /// The heartbeats topic the naming policy names.
    pub topic: String,
    /// Source alias.
    pub source: String,
    /// Target alias.
    pub target: String,
    /// `emit.heartbeats.interval.seconds`.
    pub interval: Duration,
}

impl HeartbeatEmitter {
    /// The flow's heartbeats, when `emit.heartbeats.enabled` and this process owns task 0:
    /// the topic `naming` gives is created, compacted, on the target.
    pub fn for_flow(site: &Site<'_>, naming: &dyn ReplicationPolicy) -> Result<Option<Self>, StageError> {
        let Some(interval) = site.flow.heartbeats.filter(|_| site.leads()) else { return Ok(None) };
        let topic = naming.heartbeats_topic()?;
        let spec = TopicSpec::compacted_single(topic.clone(), site.flow.heartbeats_replication_factor);
        site.target_admin.ensure_exists(&spec)?;
        Ok(Some(Self {
            flow: site.name.clone(),
            producer: site.producer(site.target, &site.flow.producer)?,
            topic,
            source: site.source.alias.to_string(),
            target: site.target.alias.to_string(),
            interval,
        }))
    }
}

/// A flow's heartbeats as periodic work.
pub struct HeartbeatTicker {
    emitter: HeartbeatEmitter,
    next: Instant,
}

impl HeartbeatEmitter {
    /// The emitter as periodic work; the first heartbeat goes out at the first tick.
    pub fn ticker(self) -> HeartbeatTicker {
        HeartbeatTicker { emitter: self, next: Instant::now() }
    }
}

impl Periodic for HeartbeatTicker {
    fn tick(&mut self) {
        if Instant::now() < self.next {
            return;
        }
        let e = &self.emitter;
        let beat = Heartbeat { source: e.source.clone(), target: e.target.clone(), timestamp: now_millis() };
        let (key, value) = (beat.encode_key(), beat.encode_value());
        match e.producer.send(BaseRecord::to(&e.topic).key(&key[..]).payload(&value[..])) {
            Ok(()) => HeartbeatSent { flow: &e.flow }.emit(),
            Err((err, _)) => {
                FlowRetrying { flow: &e.flow, what: &format!("heartbeat to {} not sent: {err}", e.topic) }.emit()
            }
        }
        // A tick delayed by other work is not made up for with a burst.
        self.next = (self.next + e.interval).max(Instant::now());
    }

    fn finish(&mut self) {
        let _ = self.emitter.producer.flush(Duration::from_secs(5));
    }
}
