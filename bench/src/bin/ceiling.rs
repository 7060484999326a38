//! The raw copy ceiling: one rdkafka consumer and one rdkafka producer in a loop, copying every
//! record of a topic to the same partition of another cluster's topic with its key, value,
//! headers and timestamp. No policy, no stages, no positions: the fastest a replicator on this
//! machine could be with librdkafka: large fetches, producer reports served every
//! [`POLL_EVERY`] records rather than after each, no client telemetry. Runs until killed.
//!
//! Usage: strait-ceiling SOURCE_BOOTSTRAP TARGET_BOOTSTRAP FROM_TOPIC TO_TOPIC PARTITIONS CODEC

use std::time::Duration;

use anyhow::{bail, Context};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

/// Records handed to the producer between two servings of its delivery reports.
const POLL_EVERY: u32 = 1000;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [source, target, from, to, partitions, codec] = args.as_slice() else {
        bail!("usage: strait-ceiling SOURCE_BOOTSTRAP TARGET_BOOTSTRAP FROM_TOPIC TO_TOPIC PARTITIONS CODEC");
    };
    let partitions: i32 = partitions.parse().context("PARTITIONS must be a number")?;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", source)
        .set("group.id", "strait-ceiling")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        // Large prefetch and fetches: the ceiling may use memory freely.
        .set("queued.max.messages.kbytes", "65536")
        .set("fetch.max.bytes", "52428800")
        .set("fetch.wait.max.ms", "100")
        // Otherwise librdkafka waits a second before fetching again for a partition whose
        // prefetch queue was full.
        .set("fetch.queue.backoff.ms", "5")
        // A partition's fetch may bring 10 MiB, not librdkafka's 1 MiB.
        .set("fetch.message.max.bytes", "10485760")
        .set("enable.metrics.push", "false")
        .create()
        .context("consumer")?;
    // The same durability as strait and MM2: idempotent, acks=all.
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", target)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("batch.size", "1000000")
        .set("compression.type", codec)
        .set("queue.buffering.max.kbytes", "1048576")
        .set("queue.buffering.max.messages", "1000000")
        .set("enable.metrics.push", "false")
        .create()
        .context("producer")?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(from, p, Offset::Beginning).context("assignment")?;
    }
    consumer.assign(&tpl).context("assign")?;
    let mut unpolled = 0u32;
    loop {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let mut record = BaseRecord::to(to.as_str()).partition(m.partition());
                if let Some(k) = m.key() {
                    record = record.key(k);
                }
                if let Some(v) = m.payload() {
                    record = record.payload(v);
                }
                if let Some(ts) = m.timestamp().to_millis() {
                    record = record.timestamp(ts);
                }
                if let Some(h) = m.headers() {
                    record = record.headers(h.detach());
                }
                loop {
                    match producer.send(record) {
                        Ok(()) => break,
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                            record = back;
                            producer.poll(Duration::from_millis(5));
                        }
                        Err((e, _)) => bail!("produce: {e}"),
                    }
                }
            }
            Some(Err(e)) => eprintln!("strait-ceiling: fetch: {e}"),
            None => unpolled = POLL_EVERY,
        }
        unpolled += 1;
        if unpolled >= POLL_EVERY {
            producer.poll(Duration::ZERO);
            unpolled = 0;
        }
    }
}
