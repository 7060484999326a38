//! Records: writing them to a cluster and reading them back.

use super::*;

pub fn consumer(bootstrap: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        // librdkafka wants a group id even for assign(); it is never joined or committed.
        .set("group.id", "strait-tests-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer")
}

/// A record as a test sends and later compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRecord {
    pub partition: i32,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp: Option<i64>,
}

impl TestRecord {
    pub fn kv(partition: i32, key: &str, value: &str) -> Self {
        Self {
            partition,
            key: Some(key.as_bytes().to_vec()),
            value: Some(value.as_bytes().to_vec()),
            headers: vec![],
            timestamp: None,
        }
    }
}

pub fn producer(bootstrap: &str, extra: &[(&str, &str)]) -> ThreadedProducer<DefaultProducerContext> {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap).set("acks", "all").set("enable.idempotence", "true").set("linger.ms", "5");
    for (k, v) in extra {
        cfg.set(*k, *v);
    }
    cfg.create().expect("producer")
}

/// Sends `records` with acks=all and waits until every one is acknowledged.
pub fn produce(bootstrap: &str, topic: &str, records: &[TestRecord], extra: &[(&str, &str)]) {
    let p = producer(bootstrap, extra);
    send_all(&p, topic, records);
    p.flush(Duration::from_secs(60)).expect("source acknowledged every record");
}

pub fn send_all(p: &ThreadedProducer<DefaultProducerContext>, topic: &str, records: &[TestRecord]) {
    for r in records {
        let mut br = BaseRecord::to(topic).partition(r.partition);
        if let Some(k) = &r.key {
            br = br.key(&k[..]);
        }
        if let Some(v) = &r.value {
            br = br.payload(&v[..]);
        }
        if let Some(ts) = r.timestamp {
            br = br.timestamp(ts);
        }
        if !r.headers.is_empty() {
            let mut hs = OwnedHeaders::new();
            for (k, v) in &r.headers {
                hs = hs.insert(rdkafka::message::Header { key: k, value: v.as_deref() });
            }
            br = br.headers(hs);
        }
        let mut pending = br;
        loop {
            match p.send(pending) {
                Ok(()) => break,
                Err((
                    rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                    back,
                )) => {
                    pending = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => panic!("produce to {topic}: {e}"),
            }
        }
    }
}

/// Sum of (high watermark - low watermark) over the topic's partitions.
pub fn record_count(bootstrap: &str, topic: &str) -> i64 {
    let Some(n) = partition_count(bootstrap, topic) else { return 0 };
    let c = consumer(bootstrap);
    (0..n as i32).map(|p| c.fetch_watermarks(topic, p, Duration::from_secs(10)).map_or(0, |(lo, hi)| hi - lo)).sum()
}

/// Reads every partition of `topic` from the beginning until `expected` records in total
/// arrived (or `timeout` passed), and returns them per partition in log order.
pub fn read_all(bootstrap: &str, topic: &str, expected: usize, timeout: Duration) -> Vec<Vec<TestRecord>> {
    let deadline = Instant::now() + timeout;
    let mut n = None;
    wait_until(timeout, || {
        n = partition_count(bootstrap, topic);
        n.is_some()
    });
    let n = n.unwrap_or_else(|| panic!("{topic} never appeared"));
    let c = consumer(bootstrap);
    let mut tpl = TopicPartitionList::new();
    for p in 0..n as i32 {
        tpl.add_partition_offset(topic, p, Offset::Beginning).expect("tpl");
    }
    c.assign(&tpl).expect("assign");
    let mut out = vec![Vec::new(); n];
    let mut total = 0;
    while total < expected && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            let headers = m
                .headers()
                .map(|hs| hs.iter().map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec))).collect())
                .unwrap_or_default();
            out[m.partition() as usize].push(TestRecord {
                partition: m.partition(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().map(<[u8]>::to_vec),
                headers,
                timestamp: m.timestamp().to_millis(),
            });
            total += 1;
        }
    }
    out
}

/// Records per partition, for comparisons that ignore the (target-assigned) timestamps' absence.
pub fn by_partition(records: &[TestRecord], partitions: usize) -> Vec<Vec<TestRecord>> {
    let mut out = vec![Vec::new(); partitions];
    for r in records {
        out[r.partition as usize].push(r.clone());
    }
    out
}

pub fn strip_timestamps(parts: &mut [Vec<TestRecord>]) {
    for p in parts.iter_mut() {
        for r in p.iter_mut() {
            r.timestamp = None;
        }
    }
}

/// The newest heartbeat of `source->target` in `topic` on `bootstrap`.
pub fn newest_heartbeat(
    bootstrap: &str,
    topic: &str,
    source: &str,
    target: &str,
) -> Option<strait_core::offsets::mm2::Heartbeat> {
    let c = consumer(bootstrap);
    let (_, high) = c.fetch_watermarks(topic, 0, Duration::from_secs(10)).ok()?;
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Offset((high - 500).max(0))).ok()?;
    c.assign(&tpl).ok()?;
    let mut newest = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        let Some(Ok(m)) = c.poll(Duration::from_millis(200)) else { continue };
        let beat =
            strait_core::offsets::mm2::Heartbeat::decode(m.key().unwrap_or_default(), m.payload().unwrap_or_default())
                .expect("MM2 layout");
        if beat.source == source && beat.target == target {
            newest = Some(beat);
        }
        if m.offset() >= high - 1 {
            break;
        }
    }
    newest
}
