//! The position topic stays bounded on a transactional source: every transaction marker breaks
//! the offset mapping into a new run, and the runs no translation needs any more are deleted,
//! so what a start-up reads stays small however long the flow runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::groups::read_checkpoints;
use crate::support::*;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer};
use strait_core::config::{ClientSettings, ClusterAlias, ClusterConfig};
use strait_core::offsets::store::{end_reader, tail_reader, Mappings, TopicTail};
use strait_core::offsets::{SourceOffset, TargetOffset};

/// What a start-up reading the position topic meets.
struct PositionTopic {
    /// Records a read from the beginning returns (tombstones included).
    read: usize,
    /// The topic's end offset: every record ever written to it.
    written: i64,
    /// The mapping those records give.
    mappings: Mappings,
}

fn read_positions(west: &str, positions: &str) -> PositionTopic {
    let (mut read, mut mappings) = (0, Mappings::default());
    let written = crate::support::load::read_partition_to_end(west, positions, |m| {
        read += 1;
        if let Some(k) = m.key() {
            mappings.apply(k, m.payload());
        }
    });
    PositionTopic { read, written, mappings }
}

fn commit_at(east: &str, group: &str, topic: &str, offset: i64) {
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", east)
        .set("group.id", group)
        .create()
        .expect("group client");
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Offset(offset)).expect("tpl");
    c.commit(&tpl, CommitMode::Sync).expect("commit");
}

fn source_end(east: &str, topic: &str) -> i64 {
    consumer(east).fetch_watermarks(topic, 0, Duration::from_secs(10)).expect("the source's end").1
}

#[test]
fn a_source_committing_a_transaction_every_100ms_keeps_the_position_topic_bounded() {
    let s = stand();
    // An alias of its own gives the flow a position topic no other test writes to.
    let alias = unique("pruned").replace('-', "");
    let topic = unique("txn-orders");
    create_topic(&s.east, &topic, 1, 3, &[]);
    let positions = test_positions_topic(&alias);
    // The cleaner has to reach the topic within the test: segments roll every second and
    // tombstones go at the next cleaning (strait's own defaults are an hour for both).
    let fast_cleaning = [
        ("cleanup.policy", "compact"),
        ("segment.ms", "1000"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("delete.retention.ms", "0"),
    ];
    create_topic(&s.west, &positions, 1, 1, &fast_cleaning);
    let group = unique("txn-cg");
    let config = format!(
        "clusters = {alias}, us-west\n{alias}.bootstrap.servers = {}\nus-west.bootstrap.servers = {}\n{alias}->us-west.enabled = true\n{alias}->us-west.topics = {topic}\nreplication.factor = 1\nrefresh.topics.interval.seconds = 1\nemit.checkpoints.interval.seconds = 1\nsync.group.offsets.enabled = false\ngroups = {group}\n",
        s.east, s.west
    );
    let strait = Strait::start(&config);

    // A transaction of 5 records every 100 ms for 60 s: up to 600 markers, each a run break.
    let stop = Arc::new(AtomicBool::new(false));
    let producing = {
        let (east, topic, stop) = (s.east.clone(), topic.clone(), stop.clone());
        std::thread::spawn(move || {
            let p = producer(&east, &[("transactional.id", &unique("tx-every-100ms"))]);
            let t = Duration::from_secs(30);
            p.init_transactions(t).expect("init transactions");
            let mut transactions = 0u64;
            let mut tick = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                p.begin_transaction().expect("begin");
                for i in 0..5 {
                    let value = format!("{transactions}-{i}");
                    p.send(BaseRecord::<[u8], _>::to(&topic).partition(0).payload(value.as_bytes())).expect("send");
                }
                p.commit_transaction(t).expect("commit");
                transactions += 1;
                // One every 100 ms where the commit itself is quicker than that.
                tick += Duration::from_millis(100);
                std::thread::sleep(tick.saturating_duration_since(Instant::now()));
            }
            transactions
        })
    };

    // The group keeps up with the source, committing at its end every second; the position
    // topic is looked at every 5 s.
    let started = Instant::now();
    let mut next_look = started + Duration::from_secs(10);
    let mut live_runs = Vec::new();
    while started.elapsed() < Duration::from_secs(60) {
        commit_at(&s.east, &group, &topic, source_end(&s.east, &topic));
        if Instant::now() >= next_look {
            let seen = read_positions(&s.west, &positions);
            live_runs.push(seen.mappings.get(&topic, 0).map_or(0, |m| m.runs().count()));
            next_look += Duration::from_secs(5);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    stop.store(true, Ordering::Relaxed);
    let transactions = producing.join().expect("the producing thread");
    // A commit on a 3-broker topic takes tens of milliseconds on a loaded machine.
    assert!(transactions >= 250, "only {transactions} transactions in 60 s: too few run breaks to show anything");

    let sent = 5 * transactions as i64;
    let remote = format!("{alias}.{topic}");
    assert!(
        wait_until(Duration::from_secs(60), || record_count(&s.west, &remote) == sent),
        "not every record arrived; log:\n{}",
        strait.log_text()
    );
    let end = source_end(&s.east, &topic);
    commit_at(&s.east, &group, &topic, end);
    let checkpoints = format!("{alias}.checkpoints.internal");
    let exact = wait_until(Duration::from_secs(30), || {
        read_checkpoints(&s.west, &checkpoints, &group)
            .last()
            .is_some_and(|c| c.upstream == end && c.downstream == sent)
    });
    assert!(
        exact,
        "the group at the source's end {end} was not checkpointed at the target's end {sent}: {:?}",
        read_checkpoints(&s.west, &checkpoints, &group).last()
    );

    // Without deletion every transaction would leave a live run: about 100 by the first look.
    assert!(live_runs.len() >= 8, "looked only {} times", live_runs.len());
    let most = live_runs.iter().copied().max().unwrap_or(0);
    assert!(most <= 60, "live runs of the mapping over the run: {live_runs:?}; log:\n{}", strait.log_text());

    // Compaction removes what was deleted: a start-up reads the live set, not the history.
    let mut seen = read_positions(&s.west, &positions);
    assert!(seen.written >= transactions as i64, "{} records written for {transactions} transactions", seen.written);
    let compacted = wait_until(Duration::from_secs(90), || {
        seen = read_positions(&s.west, &positions);
        seen.read <= 200
    });
    assert!(compacted, "a start-up would read {} of the {} records written", seen.read, seen.written);
    eprintln!(
        "{transactions} transactions; live runs every 5 s: {live_runs:?}; a start-up reads {} of {} records written",
        seen.read, seen.written
    );
    let map = seen.mappings.get(&topic, 0).expect("the partition's mapping");
    assert!(map.runs().count() <= 60, "{} live runs", map.runs().count());
    assert_eq!(map.translate(SourceOffset(end)), Some(TargetOffset(sent)), "translation at the end is still exact");
}

/// The checkpoint rounds of every flow read position topics through one client per cluster, in
/// turns: each tail reads its own topic's records once, going on where it stopped, and between
/// reads the shared client holds no partition, so it fetches nothing.
#[test]
fn position_topic_tails_sharing_one_reader_each_read_their_own_records_once() {
    let west = &stand().west;
    let (a, b) = (unique("tail-a"), unique("tail-b"));
    for topic in [&a, &b] {
        create_topic(west, topic, 1, 1, &[]);
    }
    let cluster = ClusterConfig { alias: ClusterAlias::new("us-west"), bootstrap_servers: west.clone(), line: 0 };
    let settings = ClientSettings::default();
    let reader = Arc::new(tail_reader(&cluster, &settings).expect("tail reader"));
    let ends = Arc::new(end_reader(&cluster, &settings).expect("end reader"));
    let mut tails = [&a, &b].map(|topic| TopicTail::shared(&cluster, topic, reader.clone(), ends.clone()));
    let read = |tail: &mut TopicTail| {
        let mut keys = Vec::new();
        tail.catch_up(Duration::from_secs(30), |k, _| keys.push(String::from_utf8_lossy(k).into_owned()))
            .expect("caught up");
        keys
    };
    let records = |keys: &[&str]| keys.iter().map(|k| TestRecord::kv(0, k, "v")).collect::<Vec<_>>();
    produce(west, &a, &records(&["a1", "a2", "a3"]), &[]);
    produce(west, &b, &records(&["b1", "b2"]), &[]);
    assert_eq!(read(&mut tails[0]), ["a1", "a2", "a3"]);
    assert_eq!(read(&mut tails[1]), ["b1", "b2"]);
    produce(west, &a, &records(&["a4", "a5"]), &[]);
    assert_eq!(read(&mut tails[1]), Vec::<String>::new(), "b's tail read b's records once");
    assert_eq!(read(&mut tails[0]), ["a4", "a5"], "a's tail went on after a3, whatever b's read in between");
    let held = reader.lock().map(|r| r.assignment().map(|p| p.count())).expect("reader lock");
    assert_eq!(held.ok(), Some(0), "between reads the shared reader is assigned nothing");
}
