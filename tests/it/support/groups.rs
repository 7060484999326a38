//! Consumer-group helpers for the failover tests: consume as a group and commit exactly what
//! was read, read to lag 0, and read strait's checkpoints.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use strait_core::offsets::mm2::Checkpoint;

use super::{consumer, stand, unique, wait_until, Strait, TestRecord};

/// (partition, offset, value) of a record a group consumed.
pub type Read = (i32, i64, Vec<u8>);

fn group_consumer(bootstrap: &str, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .create()
        .expect("group consumer")
}

/// Subscribes as `group`, reads `n` records, commits exactly those and leaves the group.
pub fn consume_as_group(bootstrap: &str, topic: &str, group: &str, n: usize) -> Vec<Read> {
    let c = group_consumer(bootstrap, group);
    c.subscribe(&[topic]).expect("subscribe");
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    while out.len() < n && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            out.push((m.partition(), m.offset(), m.payload().unwrap_or_default().to_vec()));
        }
    }
    assert_eq!(out.len(), n, "{group} read only {} of {n} records of {topic}", out.len());
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    for (p, o, _) in &out {
        next.insert(*p, (*o + 1).max(next.get(p).copied().unwrap_or(0)));
    }
    let mut tpl = TopicPartitionList::new();
    for (p, o) in next {
        tpl.add_partition_offset(topic, p, Offset::Offset(o)).expect("tpl");
    }
    c.commit(&tpl, CommitMode::Sync).expect("commit");
    c.unsubscribe();
    out
}

/// The group's committed offsets of `topic`, per partition (-1 where it has none).
pub fn committed_offsets(bootstrap: &str, group: &str, topic: &str, partitions: usize) -> Vec<i64> {
    let c = group_consumer(bootstrap, group);
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions as i32 {
        tpl.add_partition(topic, p);
    }
    let got = c.committed_offsets(tpl, Duration::from_secs(30)).expect("committed offsets");
    (0..partitions as i32)
        .map(|p| got.find_partition(topic, p).and_then(|e| e.offset().to_raw()).filter(|o| *o >= 0).unwrap_or(-1))
        .collect()
}

/// Waits until strait checkpointed `upstream` (the group's commits on the other cluster) and
/// synced the translated offsets to the group on `target` for `target_topic`; returns them.
pub fn wait_for_group_sync(
    target: &str,
    group: &str,
    target_topic: &str,
    upstream: &[i64],
    strait: &Strait,
) -> Vec<i64> {
    let checkpoints_topic =
        if target == stand().west { "us-east.checkpoints.internal" } else { "us-west.checkpoints.internal" };
    wait_for_group_sync_in(target, checkpoints_topic, group, target_topic, upstream, strait)
}

/// [`wait_for_group_sync`] for any pair of clusters: the checkpoints are read from
/// `checkpoints_topic` on `target`.
pub fn wait_for_group_sync_in(
    target: &str,
    checkpoints_topic: &str,
    group: &str,
    target_topic: &str,
    upstream: &[i64],
    strait: &Strait,
) -> Vec<i64> {
    let mut expected = Vec::new();
    let ok = wait_until(Duration::from_secs(90), || {
        let mut latest: BTreeMap<i32, Checkpoint> = BTreeMap::new();
        for c in read_checkpoints(target, checkpoints_topic, group).into_iter().filter(|c| c.topic == target_topic) {
            latest.insert(c.partition, c);
        }
        expected = (0..upstream.len() as i32).map(|p| latest.get(&p).map_or(-1, |c| c.downstream)).collect();
        let checkpointed = (0..upstream.len())
            .all(|p| upstream[p] < 0 || latest.get(&(p as i32)).is_some_and(|c| c.upstream == upstream[p]));
        checkpointed && committed_offsets(target, group, target_topic, upstream.len()) == expected
    });
    assert!(
        ok,
        "group {group} was not synced to {target_topic}: checkpoints say {expected:?}, the group has {:?}\nlog:\n{}",
        committed_offsets(target, group, target_topic, upstream.len()),
        strait.log_text()
    );
    expected
}

/// Subscribes as `group` without seeking and reads until its lag is 0 on every partition.
pub fn consume_to_lag_zero(bootstrap: &str, topic: &str, group: &str) -> Vec<Read> {
    let c = group_consumer(bootstrap, group);
    c.subscribe(&[topic]).expect("subscribe");
    let watermarks = consumer(bootstrap);
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last_check = Instant::now();
    loop {
        assert!(
            Instant::now() < deadline,
            "{group} never reached lag 0 on {topic}: read {}, assignment {:?}, positions {:?}",
            out.len(),
            c.assignment().map(|a| a.count()),
            c.position().map(|p| p.elements().iter().map(|e| (e.partition(), e.offset())).collect::<Vec<_>>())
        );
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            out.push((m.partition(), m.offset(), m.payload().unwrap_or_default().to_vec()));
            continue;
        }
        if last_check.elapsed() < Duration::from_millis(500) {
            continue;
        }
        last_check = Instant::now();
        let Ok(assignment) = c.assignment() else { continue };
        if assignment.count() == 0 {
            continue;
        }
        let positions = c.position().expect("position");
        // A partition with nothing left to read has no position yet: its commit is where it is.
        let committed = c.committed(Duration::from_secs(10)).expect("committed");
        let done = assignment.elements().iter().all(|e| {
            let (low, high) =
                watermarks.fetch_watermarks(topic, e.partition(), Duration::from_secs(10)).expect("watermarks");
            let at = |l: &TopicPartitionList| {
                l.find_partition(topic, e.partition()).and_then(|p| p.offset().to_raw()).filter(|o| *o >= 0)
            };
            let position = at(&positions).or_else(|| at(&committed)).unwrap_or(-1);
            high == low || position >= high
        });
        if done {
            return out;
        }
    }
}

/// Values of every readable (committed, not compacted away) record of `topic`.
pub fn read_values(bootstrap: &str, topic: &str, partitions: usize) -> Vec<Vec<u8>> {
    let c = consumer(bootstrap);
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions as i32 {
        tpl.add_partition_offset(topic, p, Offset::Beginning).expect("tpl");
    }
    c.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    let mut idle = Instant::now();
    while idle.elapsed() < Duration::from_secs(3) {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            out.push(m.payload().unwrap_or_default().to_vec());
            idle = Instant::now();
        }
    }
    out
}

/// How many records of `topic` a read_committed consumer sees.
pub fn count_readable(bootstrap: &str, topic: &str, partitions: usize) -> usize {
    read_values(bootstrap, topic, partitions).len()
}

/// Produces `records` in transactions of `per_tx`; with `abort_after`, an aborted transaction
/// of 30 records follows that many records.
pub fn produce_transactions(
    bootstrap: &str,
    topic: &str,
    records: &[TestRecord],
    per_tx: usize,
    abort_after: Option<usize>,
) {
    let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("transactional.id", unique("tx"))
        .create()
        .expect("transactional producer");
    let t = Duration::from_secs(30);
    p.init_transactions(t).expect("init transactions");
    let send = |r: &TestRecord, value: &[u8]| {
        let key = r.key.clone().unwrap_or_default();
        p.send(BaseRecord::to(topic).partition(r.partition).key(&key[..]).payload(value)).expect("send");
    };
    for (i, chunk) in records.chunks(per_tx).enumerate() {
        if abort_after.is_some_and(|a| a / per_tx == i) {
            p.begin_transaction().expect("begin");
            for (j, r) in records.iter().take(30).enumerate() {
                send(r, format!("aborted-{j}").as_bytes());
            }
            p.abort_transaction(t).expect("abort");
        }
        p.begin_transaction().expect("begin");
        for r in chunk {
            send(r, r.value.as_deref().unwrap_or_default());
        }
        p.commit_transaction(t).expect("commit");
    }
}

/// Checkpoints of `group` in a checkpoints topic, in log order.
pub fn read_checkpoints(bootstrap: &str, checkpoints_topic: &str, group: &str) -> Vec<Checkpoint> {
    let c = consumer(bootstrap);
    let Ok((low, high)) = c.fetch_watermarks(checkpoints_topic, 0, Duration::from_secs(10)) else { return Vec::new() };
    if high <= low {
        return Vec::new();
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(checkpoints_topic, 0, Offset::Beginning).expect("tpl");
    c.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            if let (Some(k), Some(v)) = (m.key(), m.payload()) {
                if let Some(cp) = Checkpoint::decode(k, v).filter(|cp| cp.group == group) {
                    out.push(cp);
                }
            }
            if m.offset() >= high - 1 {
                break;
            }
        }
    }
    out
}
