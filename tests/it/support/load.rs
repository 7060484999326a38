//! Load for the tests that count: records numbered in their values, a producer at a steady
//! rate, and the check that every number arrived.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::producer::Producer;

use super::{producer, record_count, send_all, wait_until, TestRecord};

/// `<seq>:<unix millis>:` padded to `bytes` with `v`, the value of record `seq`.
pub fn seq_value(seq: u64, bytes: usize) -> String {
    let millis = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let mut v = format!("{seq}:{millis}:");
    if v.len() < bytes {
        v.push_str(&"v".repeat(bytes - v.len()));
    }
    v
}

/// The sequence number of a value written by [`seq_value`].
pub fn seq_of(value: Option<&[u8]>) -> Option<u64> {
    std::str::from_utf8(value?).ok()?.split(':').next()?.parse().ok()
}

/// Of sequence numbers `0..total`: how many of `records` carry none of them (missing, with the
/// first few), and how many are copies of one seen before (duplicates).
pub struct SeqCheck {
    pub missing: usize,
    pub first_missing: Vec<u64>,
    pub duplicates: usize,
    pub foreign: usize,
}

pub fn check_seqs<'a>(records: impl IntoIterator<Item = &'a TestRecord>, total: u64) -> SeqCheck {
    let mut seen = vec![0u32; total as usize];
    let mut foreign = 0;
    for r in records {
        match seq_of(r.value.as_deref()) {
            Some(s) if s < total => seen[s as usize] += 1,
            _ => foreign += 1,
        }
    }
    let missing: Vec<u64> = seen.iter().enumerate().filter(|(_, n)| **n == 0).map(|(s, _)| s as u64).collect();
    let duplicates = seen.iter().map(|n| n.saturating_sub(1) as usize).sum();
    SeqCheck { missing: missing.len(), first_missing: missing.into_iter().take(10).collect(), duplicates, foreign }
}

/// Waits until `topic` holds at least `at_least` records, then until its count stays put for
/// 3 s (duplicates count too); returns the count, or None if `at_least` was not reached in
/// `timeout`.
pub fn settled_count(bootstrap: &str, topic: &str, at_least: i64, timeout: Duration) -> Option<i64> {
    if !wait_until(timeout, || record_count(bootstrap, topic) >= at_least) {
        return None;
    }
    let mut settled = record_count(bootstrap, topic);
    loop {
        std::thread::sleep(Duration::from_secs(3));
        let now = record_count(bootstrap, topic);
        if now == settled {
            return Some(settled);
        }
        settled = now;
    }
}

/// A producer thread writing `per_sec` records a second at a steady pace, values from
/// [`seq_value`] with sequence numbers from 0, round-robin over `partitions`.
pub struct SteadyProducer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
    handle: Option<std::thread::JoinHandle<u64>>,
}

impl SteadyProducer {
    pub fn start(bootstrap: &str, topic: &str, partitions: i32, per_sec: u64, value_bytes: usize) -> Self {
        Self::start_from(bootstrap, topic, partitions, per_sec, value_bytes, 0)
    }

    /// As [`SteadyProducer::start`], numbering records from `first` (after a preloaded backlog).
    pub fn start_from(
        bootstrap: &str,
        topic: &str,
        partitions: i32,
        per_sec: u64,
        value_bytes: usize,
        first: u64,
    ) -> Self {
        use std::sync::atomic::AtomicBool;
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let handle = {
            let (bootstrap, topic, stop, sent) = (bootstrap.to_string(), topic.to_string(), stop.clone(), sent.clone());
            std::thread::spawn(move || {
                let p = producer(&bootstrap, &[]);
                let started = Instant::now();
                let mut seq = first;
                while !stop.load(Ordering::Relaxed) {
                    let due = first + started.elapsed().as_millis() as u64 * per_sec / 1000;
                    let batch: Vec<TestRecord> = (seq..due)
                        .map(|s| {
                            TestRecord::kv((s % partitions as u64) as i32, &s.to_string(), &seq_value(s, value_bytes))
                        })
                        .collect();
                    send_all(&p, &topic, &batch);
                    seq = seq.max(due);
                    sent.store(seq, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(5));
                }
                p.flush(Duration::from_secs(60)).expect("the source acknowledged every record");
                seq
            })
        };
        Self { stop, sent, handle: Some(handle) }
    }

    /// Records handed to the producer so far (the next sequence number).
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Stops, waits until the source acknowledged everything, and returns the next sequence
    /// number (how many records were sent, counting from 0).
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().expect("joined once").join().expect("producer thread")
    }
}

impl Drop for SteadyProducer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Produces records `from..to` (values from [`seq_value`], round-robin over `partitions`) in
/// chunks, so a large backlog never sits in memory whole.
pub fn preload(bootstrap: &str, topic: &str, partitions: i32, from: u64, to: u64, value_bytes: usize) {
    let p = producer(bootstrap, &[]);
    let mut at = from;
    while at < to {
        let end = (at + 50_000).min(to);
        let chunk: Vec<TestRecord> = (at..end)
            .map(|s| TestRecord::kv((s % partitions as u64) as i32, &s.to_string(), &seq_value(s, value_bytes)))
            .collect();
        send_all(&p, topic, &chunk);
        at = end;
    }
    p.flush(Duration::from_secs(120)).expect("the source acknowledged the backlog");
}

/// The value of a sentinel record: written to every source partition after the load, it proves
/// by arriving that everything before it in its partition has arrived too.
pub const SENTINEL: &str = "sentinel";

/// Writes one [`SENTINEL`] to each partition of `topic`.
pub fn send_sentinels(bootstrap: &str, topic: &str, partitions: i32) {
    let records: Vec<TestRecord> = (0..partitions).map(|p| TestRecord::kv(p, SENTINEL, SENTINEL)).collect();
    super::produce(bootstrap, topic, &records, &[]);
}

/// Reads every partition of `topic` from the beginning, `read_committed`, until each has shown
/// its [`SENTINEL`]; returns the records before the sentinels per partition, in log order, or
/// `None` if a sentinel did not arrive within `timeout`.
pub fn read_through_sentinels(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    timeout: Duration,
) -> Option<Vec<Vec<TestRecord>>> {
    use rdkafka::consumer::Consumer;
    use rdkafka::message::Message;
    let deadline = Instant::now() + timeout;
    let c = super::consumer(bootstrap);
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning).expect("tpl");
    }
    c.assign(&tpl).expect("assign");
    let mut out = vec![Vec::new(); partitions as usize];
    let mut done = vec![false; partitions as usize];
    while done.iter().any(|d| !d) {
        if Instant::now() > deadline {
            return None;
        }
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            let p = m.partition() as usize;
            if m.payload() == Some(SENTINEL.as_bytes()) {
                done[p] = true;
            } else if !done[p] {
                out[p].push(TestRecord {
                    partition: m.partition(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    headers: Vec::new(),
                    timestamp: None,
                });
            }
        }
    }
    Some(out)
}

/// Every committed position record of source topic `topic` in the position topic on us-west,
/// per partition, in log order (`None` for a tombstone).
pub fn stored_positions(west: &str, topic: &str) -> std::collections::BTreeMap<i32, Vec<Option<i64>>> {
    use rdkafka::message::Message;
    use strait_core::offsets::store::{decode, StoredRecord};
    let mut out: std::collections::BTreeMap<i32, Vec<Option<i64>>> = std::collections::BTreeMap::new();
    read_partition_to_end(west, &super::test_positions_topic("us-east"), |m| {
        match m.key().and_then(|k| decode(k, m.payload())) {
            Some(StoredRecord::Position((t, p), stored)) if t == topic => {
                out.entry(p).or_default().push(Some(stored.next.get()))
            }
            Some(StoredRecord::PositionDeleted((t, p))) if t == topic => out.entry(p).or_default().push(None),
            _ => {}
        }
    });
    out
}

/// Reads partition 0 of `topic` on `bootstrap` from its start to the end it had when the read
/// began, handing each record to `each`; returns that end offset (0 for a topic that does not
/// exist yet). Fails the test when the end is not reached within a minute.
pub fn read_partition_to_end(
    bootstrap: &str,
    topic: &str,
    mut each: impl FnMut(&rdkafka::message::BorrowedMessage<'_>),
) -> i64 {
    use rdkafka::consumer::Consumer;
    let c = super::consumer(bootstrap);
    // A topic created a moment ago can be listed before its partition's leader is known.
    let known = Instant::now() + Duration::from_secs(15);
    let high = loop {
        match c.fetch_watermarks(topic, 0, Duration::from_secs(10)) {
            Ok((_, high)) => break high,
            // A topic that does not exist yet (strait creates its position topic as a flow
            // starts) has nothing to read.
            Err(e) if !super::topic_names(bootstrap).iter().any(|t| t == topic) => {
                println!("{topic} does not exist yet: {e}");
                return 0;
            }
            Err(e) if Instant::now() < known => {
                println!("the end of {topic} is not known yet: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("the end of {topic}: {e}"),
        }
    };
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Beginning).expect("tpl");
    c.assign(&tpl).expect("assign");
    let deadline = Instant::now() + Duration::from_secs(60);
    let at_end = |c: &rdkafka::consumer::BaseConsumer| {
        c.position()
            .ok()
            .and_then(|p| p.find_partition(topic, 0).and_then(|e| e.offset().to_raw()))
            .is_some_and(|o| o >= high)
    };
    while !at_end(&c) {
        assert!(Instant::now() < deadline, "{topic} was not read to its end ({high}) within 60 s");
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            each(&m);
        }
    }
    high
}

/// Source records of `topic` whose replication the target has committed: the sum over its
/// partitions of the last stored position (source offsets count records: no transaction on
/// the source in these tests).
pub fn committed_progress(west: &str, topic: &str) -> i64 {
    stored_positions(west, topic).values().filter_map(|h| h.last().copied().flatten()).sum()
}
