//! A benchmark-only prototype: copy a topic's record batches from one cluster to another without
//! decoding a record. Fetched batches are forwarded whole, their records and compression untouched;
//! only the header changes (the target producer's id, epoch and sequence, base offset 0, the CRC
//! computed again). It answers one question beside `strait-ceiling`: how much of a replicator's
//! CPU goes to taking records apart and putting them together again. It keeps no positions, skips
//! transaction markers, refuses transactional batches, and stops at the first error.
//!
//! One fetching thread per source broker leading a partition (Fetch v12, 10 MiB per partition,
//! sessionless); per target broker one thread sending idempotent, acks=all Produce v9 requests
//! (one batch per partition per request, as Kafka requires, up to five in flight) and one reading
//! their answers.
//!
//! Usage: strait-passthrough SOURCE_BOOTSTRAP TARGET_BOOTSTRAP FROM_TOPIC TO_TOPIC PARTITIONS [CODEC]
//! (CODEC is accepted for the bench's sake and ignored: the batches keep the source's compression.)

mod batch;
mod wire;

use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::Arc;

use anyhow::{bail, Context};
use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, InitProducerIdRequest, InitProducerIdResponse, ProduceRequest,
    ProduceResponse, ProducerId, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use batch::{RawBatch, Stamp};
use wire::Conn;

const FETCH_VERSION: i16 = 12;
const PRODUCE_VERSION: i16 = 9;
const INIT_PRODUCER_ID_VERSION: i16 = 4;
/// As the ceiling's consumer: 10 MiB per partition, 50 MiB per fetch, 100 ms at most waiting.
const PARTITION_FETCH_BYTES: i32 = 10 << 20;
const FETCH_BYTES: i32 = 50 << 20;
const FETCH_WAIT_MS: i32 = 100;
/// Produce requests awaiting their answer per connection: the most an idempotent producer may
/// have without risking its order on a retry.
const IN_FLIGHT: usize = 5;
/// Kafka's error codes for "not ready yet, ask again".
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
/// Batches a sender holds before it stops taking more from the fetchers.
const HELD: usize = 256;

/// A batch on its way, with its partition (the same number on both sides).
type Routed = (i32, RawBatch);

fn main() {
    if let Err(e) = run() {
        eprintln!("strait-passthrough: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (source, target, from, to) = match args.as_slice() {
        [s, t, f, to, _partitions] | [s, t, f, to, _partitions, _] => (s, t, f, to),
        _ => {
            bail!("usage: strait-passthrough SOURCE_BOOTSTRAP TARGET_BOOTSTRAP FROM_TOPIC TO_TOPIC PARTITIONS [CODEC]")
        }
    };
    let source_leaders = wire::leaders(source, from)?;
    let target_leaders = wire::leaders(target, to)?;
    let identity = init_producer_id(target)?;

    // A sender per target broker; each partition's batches go to its leader's.
    let mut routes: BTreeMap<i32, SyncSender<Routed>> = BTreeMap::new();
    let mut threads = Vec::new();
    for (&broker, address) in &target_leaders.brokers {
        let partitions: Vec<i32> =
            target_leaders.partitions.iter().filter(|(_, &l)| l == broker).map(|(&p, _)| p).collect();
        if partitions.is_empty() {
            continue;
        }
        let (tx, rx) = sync_channel(HELD);
        for p in partitions {
            routes.insert(p, tx.clone());
        }
        let (sender, reader) = Conn::connect(address)?.split()?;
        let (tickets_tx, tickets_rx) = sync_channel(IN_FLIGHT - 1);
        let topic = to.clone();
        threads.push(spawn(move || send_batches(sender, &topic, identity, &rx, &tickets_tx)));
        threads.push(spawn(move || read_answers(reader, &tickets_rx)));
    }
    let routes = Arc::new(routes);
    for (&broker, address) in &source_leaders.brokers {
        let partitions: Vec<i32> =
            source_leaders.partitions.iter().filter(|(_, &l)| l == broker).map(|(&p, _)| p).collect();
        if partitions.is_empty() {
            continue;
        }
        let conn = Conn::connect(address)?;
        let (topic, routes) = (from.clone(), Arc::clone(&routes));
        threads.push(spawn(move || fetch_batches(conn, &topic, &partitions, &routes)));
    }
    drop(routes);
    for t in threads {
        t.join().map_err(|_| anyhow::anyhow!("a thread panicked"))?;
    }
    Ok(())
}

/// Runs `job` on a thread of its own; its error ends the whole process, since a copy with one
/// stage stopped would only stall.
fn spawn(job: impl FnOnce() -> anyhow::Result<()> + Send + 'static) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        if let Err(e) = job() {
            eprintln!("strait-passthrough: {e:#}");
            std::process::exit(1);
        }
    })
}

/// An idempotent producer id from the target.
fn init_producer_id(bootstrap: &str) -> anyhow::Result<(i64, i16)> {
    let mut conn = Conn::connect(bootstrap.split(',').next().unwrap_or(bootstrap))?;
    let mut request = InitProducerIdRequest::default();
    request.transactional_id = None;
    request.transaction_timeout_ms = -1;
    request.producer_id = ProducerId(-1);
    request.producer_epoch = -1;
    for _ in 0..100 {
        let answer: InitProducerIdResponse = conn.call(ApiKey::InitProducerId, INIT_PRODUCER_ID_VERSION, &request)?;
        match answer.error_code {
            0 => return Ok((answer.producer_id.0, answer.producer_epoch)),
            // The broker is still loading or electing what hands out producer ids: ask again.
            COORDINATOR_LOAD_IN_PROGRESS | COORDINATOR_NOT_AVAILABLE => {
                std::thread::sleep(std::time::Duration::from_millis(100))
            }
            code => bail!("the target refused a producer id: error {code}"),
        }
    }
    bail!("the target gave no producer id in 10 s")
}

/// Fetches `partitions` of `topic` from their leader from the start, forever, handing each
/// whole batch to its partition's sender.
fn fetch_batches(
    mut conn: Conn,
    topic: &str,
    partitions: &[i32],
    routes: &BTreeMap<i32, SyncSender<Routed>>,
) -> anyhow::Result<()> {
    let name = TopicName(StrBytes::from_string(topic.to_string()));
    let mut offsets: BTreeMap<i32, i64> = partitions.iter().map(|&p| (p, 0)).collect();
    loop {
        let mut wanted = FetchTopic::default();
        wanted.topic = name.clone();
        wanted.partitions = offsets
            .iter()
            .map(|(&partition, &offset)| {
                let mut p = FetchPartition::default();
                p.partition = partition;
                p.fetch_offset = offset;
                p.partition_max_bytes = PARTITION_FETCH_BYTES;
                p.current_leader_epoch = -1;
                p.last_fetched_epoch = -1;
                p.log_start_offset = -1;
                p
            })
            .collect();
        let mut request = FetchRequest::default();
        request.replica_id = BrokerId(-1);
        request.max_wait_ms = FETCH_WAIT_MS;
        request.min_bytes = 1;
        request.max_bytes = FETCH_BYTES;
        request.isolation_level = 0;
        // No fetch session: every request names every partition.
        request.session_id = 0;
        request.session_epoch = -1;
        request.topics = vec![wanted];
        let answer: FetchResponse = conn.call(ApiKey::Fetch, FETCH_VERSION, &request)?;
        if answer.error_code != 0 {
            bail!("fetching {topic}: error {}", answer.error_code);
        }
        for p in answer.responses.into_iter().flat_map(|t| t.partitions) {
            let partition = p.partition_index;
            if p.error_code != 0 {
                bail!("fetching {topic}-{partition}: error {}", p.error_code);
            }
            let Some(records) = p.records else { continue };
            for b in batch::split(&records)? {
                let at = offsets.get(&partition).copied().unwrap_or(0);
                // A fetch starts at the batch holding the offset asked for.
                if b.next_offset() <= at {
                    continue;
                }
                offsets.insert(partition, b.next_offset());
                if b.is_control() {
                    continue;
                }
                if b.is_transactional() {
                    bail!("{topic}-{partition} holds transactional batches, which the prototype does not forward");
                }
                let route =
                    routes.get(&partition).with_context(|| format!("no target leader for partition {partition}"))?;
                route.send((partition, b)).context("a sender stopped")?;
            }
        }
    }
}

/// Sends the batches of `batches` to `topic` on one target broker, one batch per partition per
/// Produce request, each stamped with `identity` and the partition's next sequence. A ticket
/// per request goes to the answer reader first: the ticket channel holds IN_FLIGHT - 1, so
/// sending waits while five requests are unanswered.
fn send_batches(
    mut conn: Conn,
    topic: &str,
    (producer_id, producer_epoch): (i64, i16),
    batches: &Receiver<Routed>,
    tickets: &SyncSender<()>,
) -> anyhow::Result<()> {
    let name = TopicName(StrBytes::from_string(topic.to_string()));
    let mut held: BTreeMap<i32, VecDeque<RawBatch>> = BTreeMap::new();
    let mut sequences: BTreeMap<i32, i32> = BTreeMap::new();
    let mut count = 0usize;
    loop {
        if count == 0 {
            let Ok((p, b)) = batches.recv() else { return Ok(()) };
            held.entry(p).or_default().push_back(b);
            count += 1;
        }
        while count < HELD {
            match batches.try_recv() {
                Ok((p, b)) => {
                    held.entry(p).or_default().push_back(b);
                    count += 1;
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let mut data = Vec::new();
        for (&partition, queue) in held.iter_mut() {
            let Some(b) = queue.pop_front() else { continue };
            count -= 1;
            let sequence = sequences.entry(partition).or_insert(0);
            let mut bytes = Vec::with_capacity(b.bytes.len());
            *sequence =
                batch::stamp_into(&mut bytes, &b, Stamp { producer_id, producer_epoch, base_sequence: *sequence });
            let mut d = PartitionProduceData::default();
            d.index = partition;
            d.records = Some(Bytes::from(bytes));
            data.push(d);
        }
        let mut t = TopicProduceData::default();
        t.name = name.clone();
        t.partition_data = data;
        let mut request = ProduceRequest::default();
        request.transactional_id = None;
        request.acks = -1;
        request.timeout_ms = 30_000;
        request.topic_data = vec![t];
        tickets.send(()).context("the answer reader stopped")?;
        conn.send(ApiKey::Produce, PRODUCE_VERSION, &request)?;
    }
}

/// Reads the answer of every request a ticket stands for; any refused batch stops the copy.
fn read_answers(mut conn: Conn, tickets: &Receiver<()>) -> anyhow::Result<()> {
    while tickets.recv().is_ok() {
        let answer: ProduceResponse = conn.receive(PRODUCE_VERSION)?;
        for t in &answer.responses {
            for p in &t.partition_responses {
                if p.error_code != 0 {
                    bail!(
                        "the target refused a batch for {}-{}: error {} {}",
                        &*t.name.0,
                        p.index,
                        p.error_code,
                        p.error_message.as_deref().unwrap_or("")
                    );
                }
            }
        }
    }
    Ok(())
}
