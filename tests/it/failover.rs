//! Failover and failback of consumer groups on real clusters: checkpoints, group offset sync,
//! and a consumer that resumes on the other cluster and reads until its lag is 0, checked record
//! by record for skips and re-reads.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use crate::support::groups::*;
use crate::support::*;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use strait_core::offsets::mm2::Checkpoint;

/// The seed articles' scenario on `layout` (records per partition): `read` records consumed on
/// us-east by a group, then the group fails over to us-west and reads to lag 0.
fn failover_scenario(layout: &[usize], read: usize, extra: &str) -> Outcome {
    let s = stand();
    let topic = unique("orders");
    create_topic(&s.east, &topic, layout.len() as i32, 3, &[("min.insync.replicas", "2")]);
    let sent = layout_records(layout);
    produce(&s.east, &topic, &sent, &[]);
    let group = unique("orders-cg");
    let strait = Strait::start(&east_to_west(&topic, &format!("groups = {group}\n{extra}")));
    let remote = format!("us-east.{topic}");
    assert!(
        wait_until(Duration::from_secs(90), || record_count(&s.west, &remote) == sent.len() as i64),
        "log:\n{}",
        strait.log_text()
    );

    let east_read = consume_as_group(&s.east, &topic, &group, read);
    assert_eq!(east_read.len(), read);
    let committed = committed_offsets(&s.east, &group, &topic, layout.len());
    let synced = wait_for_group_sync(&s.west, &group, &remote, &committed, &strait);
    // MM2's own RemoteClusterUtils reads strait's checkpoints and agrees.
    let java = kafka_sh_stdout(&["tool", "tests/interop/TranslateOffsets.java", &s.west, "us-east", &group]);
    for (p, offset) in synced.iter().enumerate().filter(|(_, o)| **o >= 0) {
        assert!(
            java.lines().any(|l| l == format!("{remote} {p} {offset}")),
            "RemoteClusterUtils disagrees on partition {p} ({offset}):\n{java}"
        );
    }
    let west_read = consume_to_lag_zero(&s.west, &remote, &group);
    drop(strait);
    Outcome::of(&sent, &east_read, &west_read, layout.len())
}

#[test]
fn the_seed_scenario_resumes_exactly_where_the_group_left() {
    let o = failover_scenario(&[67, 67, 66], 120, "");
    assert_eq!(o.skipped, 0, "{o:?}");
    assert!(o.rereads.iter().all(|&r| r <= 100), "re-reads above offset.lag.max: {o:?}");
    assert_eq!(o.rereads, vec![0, 0, 0], "translation is exact at the default settings");
    eprintln!("seed scenario, offset.lag.max = 100: {o:?}");
}

#[test]
fn offset_lag_max_zero_re_reads_nothing() {
    let o = failover_scenario(&[67, 67, 66], 120, "offset.lag.max = 0");
    assert_eq!((o.skipped, o.rereads.clone()), (0, vec![0, 0, 0]), "{o:?}");
    eprintln!("seed scenario, offset.lag.max = 0: {o:?}");
}

#[test]
fn uneven_partitions_with_an_empty_one() {
    let o = failover_scenario(&[150, 40, 10, 0], 120, "");
    assert_eq!((o.skipped, o.rereads.clone()), (0, vec![0, 0, 0, 0]), "{o:?}");
}

#[test]
fn a_transactional_source_with_an_aborted_transaction() {
    let s = stand();
    let topic = unique("orders-tx");
    create_topic(&s.east, &topic, 3, 3, &[("min.insync.replicas", "2")]);
    // 200 committed records in transactions of 7 (a marker after each), and 30 aborted.
    let sent = layout_records(&[67, 67, 66]);
    produce_transactions(&s.east, &topic, &sent, 7, Some(100));
    let group = unique("orders-cg");
    let strait = Strait::start(&east_to_west(&topic, &format!("groups = {group}")));
    let remote = format!("us-east.{topic}");
    assert!(
        wait_until(Duration::from_secs(90), || count_readable(&s.west, &remote, 3) == 200),
        "log:\n{}",
        strait.log_text()
    );
    let east_read = consume_as_group(&s.east, &topic, &group, 120);
    let committed = committed_offsets(&s.east, &group, &topic, 3);
    // Gaps upstream, none downstream: the translated offsets differ from the committed ones.
    let synced = wait_for_group_sync(&s.west, &group, &remote, &committed, &strait);
    assert!(
        synced.iter().zip(&committed).any(|(w, e)| w != e),
        "offsets should differ across the gaps: {synced:?} {committed:?}"
    );
    let west_read = consume_to_lag_zero(&s.west, &remote, &group);
    let o = Outcome::of(&sent, &east_read, &west_read, 3);
    assert_eq!((o.skipped, o.rereads.clone()), (0, vec![0, 0, 0]), "{o:?}");
}

#[test]
fn exactly_once_replication_translates_exactly_across_its_own_commit_markers() {
    let s = stand();
    let topic = unique("orders-eos");
    create_topic(&s.east, &topic, 3, 3, &[("min.insync.replicas", "2")]);
    let layout = [67, 67, 66];
    let sent = layout_records(&layout);
    let group = unique("orders-cg");
    let strait = Strait::start(&east_to_west(
        &topic,
        &format!("groups = {group}\nexactly.once.source.support = enabled\ntransaction.boundary.interval.ms = 200"),
    ));
    let remote = format!("us-east.{topic}");
    // Four rounds, each a quarter of every partition, each committed on the target before the
    // next is sent: strait's commit markers sit between them in every remote partition.
    let mut readable = 0;
    for round in 0..4 {
        let mut chunk = Vec::new();
        let mut start = 0;
        for &n in &layout {
            chunk.extend_from_slice(&sent[start + n * round / 4..start + n * (round + 1) / 4]);
            start += n;
        }
        produce(&s.east, &topic, &chunk, &[]);
        readable += chunk.len();
        assert!(
            wait_until(Duration::from_secs(90), || count_readable(&s.west, &remote, 3) == readable),
            "round {round}; log:\n{}",
            strait.log_text()
        );
    }
    assert!(
        record_count(&s.west, &remote) >= 200 + 3 * 4,
        "a commit marker per round and partition takes an offset each"
    );

    let east_read = consume_as_group(&s.east, &topic, &group, 120);
    let committed = committed_offsets(&s.east, &group, &topic, 3);
    // No gap upstream, a marker after every round downstream: the offsets differ.
    let synced = wait_for_group_sync(&s.west, &group, &remote, &committed, &strait);
    assert!(
        synced.iter().zip(&committed).any(|(w, e)| w != e),
        "offsets should differ across the markers: {synced:?} {committed:?}"
    );
    let west_read = consume_to_lag_zero(&s.west, &remote, &group);
    let o = Outcome::of(&sent, &east_read, &west_read, 3);
    assert_eq!((o.skipped, o.rereads.clone()), (0, vec![0, 0, 0]), "{o:?}");
}

#[test]
fn a_compacted_source_topic() {
    let s = stand();
    let topic = unique("orders-compacted");
    create_topic(
        &s.east,
        &topic,
        1,
        3,
        &[
            ("cleanup.policy", "compact"),
            ("segment.ms", "100"),
            ("min.cleanable.dirty.ratio", "0.001"),
            ("delete.retention.ms", "100"),
        ],
    );
    // Three rounds over 60 keys, each in its own segment; compaction leaves the last round.
    let mut sent = Vec::new();
    for round in 0..3 {
        let batch: Vec<TestRecord> =
            (0..60).map(|k| TestRecord::kv(0, &format!("key-{k}"), &format!("v{round}-{k}"))).collect();
        produce(&s.east, &topic, &batch, &[]);
        sent.extend(batch);
        std::thread::sleep(Duration::from_millis(300));
    }
    produce(&s.east, &topic, &[TestRecord::kv(0, "roll", "roll")], &[]);
    assert!(
        wait_until(Duration::from_secs(120), || count_readable(&s.east, &topic, 1) < 181),
        "the log cleaner never compacted {topic} (is log.cleaner.backoff.ms low on the stand?)"
    );
    let group = unique("orders-cg");
    let strait = Strait::start(&east_to_west(&topic, &format!("groups = {group}")));
    let remote = format!("us-east.{topic}");
    let left = count_readable(&s.east, &topic, 1);
    assert!(
        wait_until(Duration::from_secs(90), || count_readable(&s.west, &remote, 1) >= left),
        "log:\n{}",
        strait.log_text()
    );
    let east_read = consume_as_group(&s.east, &topic, &group, 30);
    let committed = committed_offsets(&s.east, &group, &topic, 1);
    wait_for_group_sync(&s.west, &group, &remote, &committed, &strait);
    let west_read = consume_to_lag_zero(&s.west, &remote, &group);
    // What survived compaction upstream is what must be read, once.
    let survivors: HashSet<Vec<u8>> = read_values(&s.east, &topic, 1).into_iter().collect();
    let read: Vec<Vec<u8>> = east_read.iter().chain(&west_read).map(|r| r.2.clone()).collect();
    let missing: Vec<_> = survivors.iter().filter(|v| !read.contains(v)).collect();
    assert!(missing.is_empty(), "skipped {} surviving records", missing.len());
    let rereads = west_read.iter().filter(|w| east_read.iter().any(|e| e.2 == w.2)).count();
    assert_eq!(rereads, 0);
}

#[test]
fn checkpoints_stay_monotonic_across_a_restart_and_rewind_with_the_group() {
    let s = stand();
    let Replicated { topic, sent, group, config, strait, remote } = replicated_orders("");

    let mut east_read = consume_as_group(&s.east, &topic, &group, 60);
    let first = committed_offsets(&s.east, &group, &topic, 3);
    assert!(
        wait_until(Duration::from_secs(60), || latest_checkpoints(&s.west, &group, &remote, 3) == first),
        "log:\n{}",
        strait.log_text()
    );
    drop(strait);

    // Between commits strait restarts.
    let strait = Strait::start(&config);
    east_read.extend(consume_as_group(&s.east, &topic, &group, 60));
    let second = committed_offsets(&s.east, &group, &topic, 3);
    assert!(
        wait_until(Duration::from_secs(60), || latest_checkpoints(&s.west, &group, &remote, 3) == second),
        "log:\n{}",
        strait.log_text()
    );
    let history = checkpoint_history(&s.west, &group);
    for p in 0..3 {
        let downs: Vec<i64> = history.iter().filter(|c| c.partition == p).map(|c| c.downstream).collect();
        assert!(downs.windows(2).all(|w| w[0] <= w[1]), "partition {p} went back: {downs:?}");
    }
    wait_for_group_sync(&s.west, &group, &remote, &second, &strait);
    let west_read = consume_to_lag_zero(&s.west, &remote, &group);
    let o = Outcome::of(&sent, &east_read, &west_read, 3);
    assert_eq!((o.skipped, o.rereads.clone()), (0, vec![0, 0, 0]), "{o:?}");

    // The group reads to 90% on us-east, is checkpointed there, then is rewound to 10%.
    let late: Vec<i64> = [67, 67, 66].iter().map(|n| n * 9 / 10).collect();
    commit(&s.east, &group, &topic, &late);
    assert!(
        wait_until(Duration::from_secs(60), || latest_checkpoints(&s.west, &group, &remote, 3) == late),
        "log:\n{}",
        strait.log_text()
    );
    let early: Vec<i64> = [67, 67, 66].iter().map(|n| n / 10).collect();
    commit(&s.east, &group, &topic, &early);
    assert!(
        wait_until(Duration::from_secs(60), || latest_checkpoints(&s.west, &group, &remote, 3) == early),
        "checkpoints did not follow the rewind: {:?}\nlog:\n{}",
        latest_checkpoints(&s.west, &group, &remote, 3),
        strait.log_text()
    );
}

#[test]
fn failback_maps_a_group_on_the_remote_topic_back_to_the_original() {
    let s = stand();
    // Both directions; the way back replicates nothing of its own here.
    let back = format!("us-west->us-east.enabled = true\nus-west->us-east.topics = {}", unique("nothing"));
    let Replicated { topic, sent, group, strait, remote, .. } = replicated_orders(&back);

    // The group failed over earlier and consumed 150 records of the copy on us-west.
    let west_read = consume_as_group(&s.west, &remote, &group, 150);
    let on_west = committed_offsets(&s.west, &group, &remote, 3);
    // us-east is back: the group's checkpoints map to `orders` there, and its offsets follow.
    let synced = wait_for_group_sync(&s.east, &group, &topic, &on_west, &strait);
    assert_eq!(synced, on_west, "a 1:1 copy maps back offset for offset");
    let east_read = consume_to_lag_zero(&s.east, &topic, &group);
    let o = Outcome::of(&sent, &west_read, &east_read, 3);
    assert_eq!((o.skipped, o.rereads.clone()), (0, vec![0, 0, 0]), "{o:?}");
    let back: Vec<Checkpoint> = read_checkpoints(&s.east, "us-west.checkpoints.internal", &group);
    assert!(back.iter().any(|c| c.topic == topic), "checkpoints name the original topic: {back:?}");
}

/// The seed's 200 orders over 3 partitions on us-east, replicated to us-west by a strait that
/// checkpoints one fresh group (plus `extra` config lines).
struct Replicated {
    topic: String,
    sent: Vec<TestRecord>,
    group: String,
    config: String,
    strait: Strait,
    remote: String,
}

fn replicated_orders(extra: &str) -> Replicated {
    let s = stand();
    let topic = unique("orders");
    create_topic(&s.east, &topic, 3, 3, &[("min.insync.replicas", "2")]);
    let sent = layout_records(&[67, 67, 66]);
    produce(&s.east, &topic, &sent, &[]);
    let group = unique("orders-cg");
    let config = east_to_west(&topic, &format!("groups = {group}\n{extra}"));
    let strait = Strait::start(&config);
    let remote = format!("us-east.{topic}");
    assert!(
        wait_until(Duration::from_secs(90), || record_count(&s.west, &remote) == 200),
        "log:\n{}",
        strait.log_text()
    );
    Replicated { topic, sent, group, config, strait, remote }
}

/// `records` as (partition, count) → values unique over the test.
fn layout_records(layout: &[usize]) -> Vec<TestRecord> {
    let mut out = Vec::new();
    for (p, &n) in layout.iter().enumerate() {
        for i in 0..n {
            out.push(TestRecord::kv(p as i32, &format!("k{p}-{i}"), &format!("order-{p}-{i}")));
        }
    }
    out
}

/// What a failed-over consumer did, per partition.
#[derive(Debug)]
struct Outcome {
    skipped: usize,
    rereads: Vec<usize>,
}

impl Outcome {
    fn of(sent: &[TestRecord], before: &[Read], after: &[Read], partitions: usize) -> Self {
        let seen: HashSet<&Vec<u8>> = before.iter().chain(after).map(|r| &r.2).collect();
        let skipped = sent.iter().filter(|r| !seen.contains(r.value.as_ref().expect("value"))).count();
        let earlier: HashSet<&Vec<u8>> = before.iter().map(|r| &r.2).collect();
        let mut rereads = vec![0; partitions];
        for r in after {
            if earlier.contains(&r.2) {
                rereads[r.0 as usize] += 1;
            }
        }
        Self { skipped, rereads }
    }
}

fn commit(bootstrap: &str, group: &str, topic: &str, offsets: &[i64]) {
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for (p, o) in offsets.iter().enumerate() {
        tpl.add_partition_offset(topic, p as i32, Offset::Offset(*o)).expect("tpl");
    }
    c.commit(&tpl, CommitMode::Sync).expect("commit");
}

/// Every checkpoint record of `group` in us-east.checkpoints.internal on us-west, in log order.
fn checkpoint_history(west: &str, group: &str) -> Vec<Checkpoint> {
    read_checkpoints(west, "us-east.checkpoints.internal", group)
}

/// The latest checkpoint's upstream offset per partition (-1 where there is none).
fn latest_checkpoints(west: &str, group: &str, remote: &str, partitions: usize) -> Vec<i64> {
    let mut latest = BTreeMap::new();
    for c in checkpoint_history(west, group).into_iter().filter(|c| c.topic == remote) {
        latest.insert(c.partition, c.upstream);
    }
    (0..partitions as i32).map(|p| latest.get(&p).copied().unwrap_or(-1)).collect()
}

#[test]
fn a_group_committed_at_the_start_of_an_empty_partition_fails_over_to_the_start_and_skips_nothing_later() {
    let s = stand();
    let topic = unique("empty-start");
    create_topic(&s.east, &topic, 2, 3, &[]);
    let group = unique("early-cg");
    let latest_consumer = |bootstrap: &str| -> BaseConsumer {
        rdkafka::config::ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "latest")
            .create()
            .expect("consumer")
    };
    // The group starts before anything was produced: it commits 0 on both empty partitions.
    let mut tpl = TopicPartitionList::new();
    for p in 0..2 {
        tpl.add_partition_offset(&topic, p, Offset::Offset(0)).expect("tpl");
    }
    latest_consumer(&s.east).commit(&tpl, CommitMode::Sync).expect("commit 0 on us-east");

    let strait = Strait::start(&east_to_west(&topic, &format!("groups = {group}")));
    let remote = format!("us-east.{topic}");
    assert_eq!(
        wait_for_group_sync(&s.west, &group, &remote, &[0, 0], &strait),
        vec![0, 0],
        "exact translation gives the start"
    );

    // Produced after the failover point and replicated before the consumer starts on us-west:
    // with no commit there, `latest` would skip all of it.
    let sent: Vec<TestRecord> = (0..100).map(|i| TestRecord::kv(i % 2, &format!("k{i}"), &format!("v{i}"))).collect();
    produce(&s.east, &topic, &sent, &[]);
    assert!(
        wait_until(Duration::from_secs(90), || record_count(&s.west, &remote) == 100),
        "log:\n{}",
        strait.log_text()
    );
    let c = latest_consumer(&s.west);
    c.subscribe(&[&remote]).expect("subscribe");
    let mut read = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while read < 100 && std::time::Instant::now() < deadline {
        if let Some(Ok(_)) = c.poll(Duration::from_millis(200)) {
            read += 1;
        }
    }
    assert_eq!(read, 100, "the failed-over group skipped records produced after its commit");
}

/// Checkpoints already in `us-east.checkpoints.internal` on us-west, written there by another
/// replicator of the same clusters, for a group this flow does not include and for this flow's
/// group on a topic it does not replicate: group offset sync commits neither, while it does
/// sync the flow's own group (the sentinel that sync rounds ran after the foreign checkpoints
/// were read).
#[test]
fn group_offset_sync_commits_only_the_groups_and_topics_of_its_own_flow() {
    let s = stand();
    let Replicated { topic, group, strait: first, remote, config, .. } = replicated_orders("");
    drop(first);
    let foreign_group = unique("foreign-cg");
    let foreign_topic = format!("us-east.{}", unique("not-replicated"));
    let checkpoint = |group: &str, topic: &str| {
        let c = Checkpoint {
            group: group.to_string(),
            topic: topic.to_string(),
            partition: 0,
            upstream: 5,
            downstream: 5,
            metadata: String::new(),
        };
        let mut r = TestRecord::kv(0, "", "");
        (r.key, r.value) = (Some(c.encode_key()), Some(c.encode_value()));
        r
    };
    produce(
        &s.west,
        "us-east.checkpoints.internal",
        &[checkpoint(&foreign_group, &remote), checkpoint(&group, &foreign_topic)],
        &[],
    );

    // Restarted, the flow reads every checkpoint back (for monotonic checkpoints), foreign ones
    // included.
    let strait = Strait::start(&config);
    consume_as_group(&s.east, &topic, &group, 30);
    let committed = committed_offsets(&s.east, &group, &topic, 3);
    wait_for_group_sync(&s.west, &group, &remote, &committed, &strait);
    assert_eq!(
        committed_offsets(&s.west, &foreign_group, &remote, 3),
        vec![-1, -1, -1],
        "a group the flow does not include was committed on the target\nlog:\n{}",
        strait.log_text()
    );
    assert_eq!(
        committed_offsets(&s.west, &group, &foreign_topic, 1),
        vec![-1],
        "the flow's group was committed on a topic the flow does not replicate\nlog:\n{}",
        strait.log_text()
    );
}
