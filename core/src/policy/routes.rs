//! Where a record hook may route a record: never to a topic that belongs to Kafka or to a
//! replicator (positions, offset syncs, checkpoints, heartbeats, `__*`), whose readers would take
//! the record for their own bookkeeping.

use std::collections::{HashMap, HashSet};

use super::{PolicyError, ReplicationPolicy};

/// Checks the topics a record hook routes to, answering once per name.
pub struct RouteGuard {
    naming: Box<dyn ReplicationPolicy>,
    reserved: HashSet<String>,
    heartbeats: String,
    answers: HashMap<String, bool>,
}

impl RouteGuard {
    /// A guard naming topics with `naming`; `reserved` adds the flow's own bookkeeping topics
    /// by name (its position topic, checkpoints and offset-syncs topics).
    pub fn new(
        naming: Box<dyn ReplicationPolicy>,
        reserved: impl IntoIterator<Item = String>,
    ) -> Result<Self, PolicyError> {
        let heartbeats = naming.heartbeats_topic()?;
        let mut reserved: HashSet<String> = reserved.into_iter().collect();
        reserved.insert(heartbeats.clone());
        Ok(Self { naming, reserved, heartbeats, answers: HashMap::new() })
    }

    /// Whether `topic` is internal: Kafka's (`__*`), the naming policy's internal topics, the
    /// flow's bookkeeping topics, or a heartbeats topic however many hops it came.
    pub fn is_internal(&mut self, topic: &str) -> Result<bool, PolicyError> {
        if let Some(answer) = self.answers.get(topic) {
            return Ok(*answer);
        }
        // Every replicator's bookkeeping by its name's shape too, whatever the naming policy says.
        let bookkeeping = topic.starts_with("strait-offsets.")
            || topic.starts_with("mm2-")
            || topic.ends_with(".checkpoints.internal");
        let answer = bookkeeping
            || topic.starts_with("__")
            || self.reserved.contains(topic)
            || self.naming.is_internal_topic(topic)?
            || self.upstream_is_heartbeats(topic)?;
        self.answers.insert(topic.to_string(), answer);
        Ok(answer)
    }

    /// MM2's `isHeartbeatsTopic`: the topic is the heartbeats topic once its aliases are stripped.
    fn upstream_is_heartbeats(&self, topic: &str) -> Result<bool, PolicyError> {
        let mut current = topic.to_string();
        while let Some(up) = self.naming.upstream_topic(&current)? {
            if up == self.heartbeats {
                return Ok(true);
            }
            if up.len() >= current.len() {
                break;
            }
            current = up;
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests_support::default_naming;

    #[test]
    fn internal_topics_of_every_kind_are_recognised_and_ordinary_ones_are_not() {
        let mut guard = RouteGuard::new(default_naming(), ["strait-offsets.us-east.internal".to_string()]).unwrap();
        for t in [
            "__consumer_offsets",
            "__transaction_state",
            "strait-offsets.us-east.internal",
            "us-east.checkpoints.internal",
            "mm2-offset-syncs.us-west.internal",
            "heartbeats",
            "us-east.heartbeats",
            "us-west.us-east.heartbeats",
        ] {
            assert!(guard.is_internal(t).unwrap(), "{t}");
        }
        for t in ["orders", "us-east.orders", "heartbeats-archive", "orders.dlq"] {
            assert!(!guard.is_internal(t).unwrap(), "{t}");
        }
    }
}
