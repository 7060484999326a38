//! The first checkpoint and the first group offset sync strait writes for a group are already
//! exact: MirrorMaker 2's `testReplicationWithEmptyPartition` shape, the group included from the
//! start, checkpoints and sync every second.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::groups::read_checkpoints;
use crate::support::*;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

const PARTITIONS: i32 = 10;
/// Records on each of partitions 0-8; partition 9 stays empty.
const RECORDS: i64 = 10;
const REPETITIONS: usize = 10;

/// A client of `group` on `bootstrap` that never joins it: it commits for the group, or reads
/// what the group committed, while the group has no members.
fn group_client(bootstrap: &str, group: &str) -> BaseConsumer {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("group client")
}

fn partitions(topic: &str, offsets: impl Fn(i32) -> Offset) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, offsets(p)).expect("partition");
    }
    tpl
}

/// What one run wrote first: per partition, the first checkpoint's downstream offset and the
/// first offset the group had on the target.
#[derive(Debug, Default)]
struct Firsts {
    checkpoint: BTreeMap<i32, i64>,
    synced: BTreeMap<i32, i64>,
}

fn one_run(run: usize) -> Firsts {
    let s = stand();
    let topic = unique("empty-partition");
    create_topic(&s.east, &topic, PARTITIONS, 1, &[]);
    let records: Vec<TestRecord> = (0..PARTITIONS - 1)
        .flat_map(|p| (0..RECORDS).map(move |i| TestRecord::kv(p, &format!("k{i}"), &format!("{p}-{i}"))))
        .collect();
    produce(&s.east, &topic, &records, &[]);
    let group = unique("empty-partition-cg");
    let committed = partitions(&topic, |p| Offset::Offset(if p < PARTITIONS - 1 { RECORDS } else { 0 }));
    group_client(&s.east, &group).commit(&committed, CommitMode::Sync).expect("commit on the source");

    let strait = Strait::start(&east_to_west(
        &topic,
        &format!("groups = {group}\nus-east->us-west.offset.storage.topic = strait-offsets.{topic}.internal"),
    ));
    let remote = format!("us-east.{topic}");
    // The group on the target from the moment strait starts, ten times a second: the sync
    // writes every second, so no value it wrote goes unseen.
    let target = group_client(&s.west, &group);
    let mut firsts = Firsts::default();
    let deadline = Instant::now() + Duration::from_secs(90);
    while firsts.synced.len() < PARTITIONS as usize && Instant::now() < deadline {
        let asked = partitions(&remote, |_| Offset::Invalid);
        if let Ok(got) = target.committed_offsets(asked, Duration::from_secs(10)) {
            for e in got.elements() {
                if let Some(o) = e.offset().to_raw().filter(|o| *o >= 0) {
                    firsts.synced.entry(e.partition()).or_insert(o);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        firsts.synced.len(),
        PARTITIONS as usize,
        "run {run}: the group was not synced on every partition within 90 s: {firsts:?}\nlog:\n{}",
        strait.log_text()
    );
    // The checkpoints topic keeps every checkpoint in the order written.
    for c in read_checkpoints(&s.west, "us-east.checkpoints.internal", &group).into_iter().filter(|c| c.topic == remote)
    {
        firsts.checkpoint.entry(c.partition).or_insert(c.downstream);
    }
    assert_eq!(record_count(&s.west, &remote), RECORDS * (PARTITIONS as i64 - 1), "run {run}: every record crossed");
    firsts
}

#[test]
fn the_first_checkpoint_and_group_sync_of_a_group_are_exact_on_every_partition_including_an_empty_one() {
    let expected: BTreeMap<i32, i64> =
        (0..PARTITIONS).map(|p| (p, if p < PARTITIONS - 1 { RECORDS } else { 0 })).collect();
    for run in 0..REPETITIONS {
        let firsts = one_run(run);
        eprintln!("run {run}: first checkpoints {:?}, first synced {:?}", firsts.checkpoint, firsts.synced);
        assert_eq!(firsts.checkpoint, expected, "run {run}: the first checkpoint written per partition");
        assert_eq!(firsts.synced, expected, "run {run}: the first offset synced to the group on the target");
    }
}
