//! MM2's heartbeats: every `emit.heartbeats.interval.seconds` a record (source alias, target
//! alias, timestamp) goes to the `heartbeats` topic on the target. Replicated onward like any
//! topic (as `<alias>.heartbeats`), they show that a flow is alive and how far behind it is.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

use crate::events::FlowRetrying;
use crate::offsets::mm2::Heartbeat;
use crate::pipeline::now_millis;

/// Writes a flow's heartbeats until the flow stops.
pub struct HeartbeatEmitter {
    /// `source->target`.
    pub flow: String,
    /// A producer on the target cluster.
    pub producer: ThreadedProducer<DefaultProducerContext>,
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
    /// Emits one heartbeat per interval until `stop` is set.
    pub fn run(self, stop: Arc<AtomicBool>) {
        let mut next = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            if Instant::now() >= next {
                let beat = Heartbeat { source: self.source.clone(), target: self.target.clone(), timestamp: now_millis() };
                let (key, value) = (beat.encode_key(), beat.encode_value());
                if let Err((e, _)) = self.producer.send(BaseRecord::to(&self.topic).key(&key[..]).payload(&value[..])) {
                    FlowRetrying { flow: &self.flow, what: &format!("heartbeat to {} not sent: {e}", self.topic) }.emit();
                }
                next += self.interval;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.producer.flush(Duration::from_secs(5));
    }
}
