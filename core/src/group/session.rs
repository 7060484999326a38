//! What the group coordinator checks before a flow stores positions: the membership's member id
//! and generation, sent with each position transaction (`send_offsets_to_transaction`, as Kafka
//! Streams fences since KIP-447). A process that lost its tasks without knowing (frozen past its
//! session, cut off from the coordinator) still holds its old member id and generation: the
//! coordinator refuses them, the transaction aborts, and its positions never overwrite what the
//! tasks' new owner stored.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

/// The membership of one flow, as the group coordinator knows it right now.
pub struct GroupSession {
    /// The member id and generation (`None` while this process is no member: before joining,
    /// after losing its assignment), and the tasks the coordinator gave with them.
    current: Mutex<(Option<ConsumerGroupMetadata>, BTreeSet<u32>)>,
    /// The flow's tasks topic, whose partitions stand for its tasks.
    tasks_topic: String,
}

impl GroupSession {
    pub(super) fn new(tasks_topic: String) -> Arc<Self> {
        Arc::new(Self { current: Mutex::new((None, BTreeSet::new())), tasks_topic })
    }

    /// Records the member id and generation the coordinator last gave, and the tasks that go
    /// with them; `None` when they are no longer valid. (A consumer that lost its assignment
    /// resets its member id, and the coordinator skips its checks for an empty one: such
    /// metadata must never be sent.)
    pub(super) fn set(&self, metadata: Option<ConsumerGroupMetadata>, tasks: BTreeSet<u32>) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = (metadata, tasks);
    }

    /// Narrows the tasks after a revocation, keeping the membership.
    pub(super) fn retain(&self, tasks: BTreeSet<u32>) {
        self.current.lock().unwrap_or_else(|p| p.into_inner()).1 = tasks;
    }

    /// Adds the membership to `producer`'s open transaction, for the tasks `owned`, waiting at
    /// most `wait`: the commit then succeeds only if this process is still the member it was
    /// when it got them. A timeout is retriable: call again.
    pub fn join_transaction<C: ProducerContext>(
        &self,
        producer: &BaseProducer<C>,
        owned: &BTreeSet<u32>,
        wait: Duration,
    ) -> Result<(), KafkaError> {
        let mut offsets = TopicPartitionList::new();
        for &task in owned {
            offsets.add_partition_offset(&self.tasks_topic, task as i32, Offset::Offset(0))?;
        }
        let current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        // A writer of tasks handed on since (one that outlived its flow) is refused here, as
        // the coordinator refuses a member it dropped.
        let (Some(metadata), true) = (current.0.as_ref(), owned.is_subset(&current.1)) else {
            return Err(KafkaError::Global(RDKafkaErrorCode::UnknownMemberId));
        };
        producer.send_offsets_to_transaction(&offsets, metadata, wait)
    }
}
