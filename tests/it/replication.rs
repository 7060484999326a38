//! Records, partitions, order, keys, values, headers and timestamps arrive as they left.

use std::time::Duration;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(90);

#[test]
fn seed_stand_200_orders_arrive_200_of_200_in_the_same_partitions_and_order() {
    let s = stand();
    let orders = unique("orders");
    create_topic(&s.east, &orders, 3, 3, &[("min.insync.replicas", "2")]);
    let sent: Vec<TestRecord> =
        (0..200).map(|i| TestRecord::kv(i % 3, &format!("order-{i}"), &format!("{{\"id\":{i}}}"))).collect();
    produce(&s.east, &orders, &sent, &[]);

    // The seed articles' file, as `examples/active-passive` ships it.
    let strait = Strait::start(&example("active-passive", &orders));
    let remote = format!("us-east.{orders}");
    let mut got = read_all(&s.west, &remote, 200, WAIT);
    assert_eq!(partition_count(&s.west, &remote), Some(3), "remote topic keeps the partition count");
    strip_timestamps(&mut got);
    assert_eq!(got, by_partition(&sent, 3), "200/200, same partition, same order.\nstrait log:\n{}", strait.log_text());

    // Counters move when the producer thread handles the acknowledgement, which can trail the
    // moment a consumer sees the record: wait for them to settle, then check.
    let counted_of = |metrics: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| l.starts_with("strait_replication_records_total") && l.contains(&format!("topic=\"{remote}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let mut metrics = String::new();
    let counted = wait_until(Duration::from_secs(20), || {
        metrics = strait.metrics();
        counted_of(&metrics) >= 200.0
    });
    assert!(counted, "the 200 records were not counted for {remote}:\n{metrics}");
    for name in [
        "strait_replication_records_total",
        "strait_replication_bytes_total",
        "strait_replication_record_age_seconds",
        "strait_replication_latency_seconds",
        "strait_stage_queue_batches",
    ] {
        assert!(metrics.contains(name), "metric {name} missing from:\n{metrics}");
    }
    let counted = counted_of(&metrics);
    assert_eq!(counted, 200.0, "record count metric over the three partitions");
}

#[test]
fn headers_null_keys_tombstones_and_timestamps_survive() {
    let s = stand();
    let topic = unique("shapes");
    create_topic(&s.east, &topic, 2, 1, &[]);
    // Explicit timestamps an hour back: old enough to tell from append time, young enough that
    // the brokers' 7-day retention does not delete them mid-test.
    let base =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64 - 3_600_000;
    let sent = vec![
        TestRecord { partition: 0, key: None, value: Some(b"no key".to_vec()), headers: vec![], timestamp: Some(base) },
        TestRecord { partition: 0, key: Some(b"k".to_vec()), value: None, headers: vec![], timestamp: Some(base + 1) },
        TestRecord {
            partition: 1,
            key: Some(b"h".to_vec()),
            value: Some(vec![0, 159, 146, 150]),
            headers: vec![
                ("trace".into(), Some(b"abc".to_vec())),
                ("null-header".into(), None),
                ("trace".into(), Some(b"dup".to_vec())),
            ],
            timestamp: Some(base - 60_000),
        },
        TestRecord {
            partition: 1,
            key: None,
            value: None,
            headers: vec![("only".into(), Some(vec![]))],
            timestamp: Some(base + 2),
        },
    ];
    produce(&s.east, &topic, &sent, &[]);
    let strait = Strait::start(&east_to_west(&topic, ""));
    let got = read_all(&s.west, &format!("us-east.{topic}"), sent.len(), WAIT);
    assert_eq!(got, by_partition(&sent, 2), "strait log:\n{}", strait.log_text());
}

#[test]
fn batches_compressed_with_gzip_snappy_lz4_and_zstd_are_replicated() {
    let s = stand();
    let topic = unique("codecs");
    create_topic(&s.east, &topic, 1, 1, &[]);
    let mut sent = Vec::new();
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let batch: Vec<TestRecord> =
            (0..50).map(|i| TestRecord::kv(0, codec, &format!("{codec}-{i}-{}", "x".repeat(200)))).collect();
        produce(&s.east, &topic, &batch, &[("compression.type", codec)]);
        sent.extend(batch);
    }
    let strait = Strait::start(&east_to_west(&topic, ""));
    let mut got = read_all(&s.west, &format!("us-east.{topic}"), sent.len(), WAIT);
    strip_timestamps(&mut got);
    assert_eq!(got, by_partition(&sent, 1), "strait log:\n{}", strait.log_text());
}

#[test]
fn aborted_transactions_never_reach_the_target() {
    use rdkafka::producer::Producer;
    let s = stand();
    let topic = unique("txn");
    create_topic(&s.east, &topic, 1, 3, &[]);
    let p = producer(&s.east, &[("transactional.id", &unique("txn-producer"))]);
    p.init_transactions(Duration::from_secs(30)).expect("init transactions");
    let t = Duration::from_secs(30);
    let batch =
        |tag: &str| -> Vec<TestRecord> { (0..10).map(|i| TestRecord::kv(0, tag, &format!("{tag}-{i}"))).collect() };
    p.begin_transaction().unwrap();
    send_all(&p, &topic, &batch("committed-1"));
    p.commit_transaction(t).unwrap();
    p.begin_transaction().unwrap();
    send_all(&p, &topic, &batch("aborted"));
    p.flush(t).unwrap();
    p.abort_transaction(t).unwrap();
    p.begin_transaction().unwrap();
    send_all(&p, &topic, &batch("committed-2"));
    p.commit_transaction(t).unwrap();

    let strait = Strait::start(&east_to_west(&topic, ""));
    let remote = format!("us-east.{topic}");
    let mut got = read_all(&s.west, &remote, 20, WAIT);
    strip_timestamps(&mut got);
    let mut expected = batch("committed-1");
    expected.extend(batch("committed-2"));
    assert_eq!(got, vec![expected], "strait log:\n{}", strait.log_text());
    // The last committed batch is the sentinel: an aborted record that was copied would sit
    // before it in the one partition, so the target holds exactly the 20 committed records.
    assert_eq!(record_count(&s.west, &remote), 20);
}

#[test]
fn internal_topics_are_never_mirrored_whatever_topics_says() {
    let s = stand();
    let base = unique("internal");
    let data = format!("{base}-data");
    let internals = [format!("{base}.internal"), format!("{base}-internal"), format!("__{base}")];
    for t in std::iter::once(&data).chain(internals.iter()) {
        create_topic(&s.east, t, 1, 1, &[]);
        produce(&s.east, t, &[TestRecord::kv(0, "k", "v")], &[]);
    }
    // A committed group makes sure __consumer_offsets exists on the source.
    {
        use rdkafka::consumer::{CommitMode, Consumer};
        let c: rdkafka::consumer::BaseConsumer =
            rdkafka::ClientConfig::new().set("bootstrap.servers", &s.east).set("group.id", &base).create().unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset(&data, 0, rdkafka::Offset::Offset(1)).unwrap();
        c.commit(&tpl, CommitMode::Sync).expect("commit group offset");
    }
    let config = east_to_west(&format!("{base}.*, __consumer_offsets, __.*, .*internal"), "topics.exclude =\n");
    let strait = Strait::start(&config);
    read_all(&s.west, &format!("us-east.{data}"), 1, WAIT);
    // Sentinel: a topic created now is mirrored by a later discovery round, after every round
    // that could have mirrored the internal topics.
    let late = format!("{base}-late");
    create_topic(&s.east, &late, 1, 1, &[]);
    produce(&s.east, &late, &[TestRecord::kv(0, "k", "v")], &[]);
    assert_eq!(read_all(&s.west, &format!("us-east.{late}"), 1, WAIT)[0].len(), 1, "log:\n{}", strait.log_text());
    let west = topic_names(&s.west);
    assert!(west.contains(&format!("us-east.{data}")));
    for t in internals.iter().cloned().chain(["__consumer_offsets".to_string(), test_positions_topic("us-east")]) {
        assert!(!west.contains(&format!("us-east.{t}")), "{t} was mirrored; strait log:\n{}", strait.log_text());
    }
}

#[test]
fn topics_that_came_from_the_target_are_not_sent_back() {
    let s = stand();
    let base = unique("cycle");
    let looped = format!("us-west.{base}");
    let local = format!("{base}-local");
    create_topic(&s.east, &looped, 1, 1, &[]);
    create_topic(&s.east, &local, 1, 1, &[]);
    produce(&s.east, &looped, &[TestRecord::kv(0, "k", "v")], &[]);
    produce(&s.east, &local, &[TestRecord::kv(0, "k", "v")], &[]);
    let strait = Strait::start(&east_to_west(&format!("us-west.{base}, {base}-local, {base}-late"), ""));
    read_all(&s.west, &format!("us-east.{local}"), 1, WAIT);
    // Sentinel: a topic created now is mirrored by a later discovery round.
    let late = format!("{base}-late");
    create_topic(&s.east, &late, 1, 1, &[]);
    produce(&s.east, &late, &[TestRecord::kv(0, "k", "v")], &[]);
    assert_eq!(read_all(&s.west, &format!("us-east.{late}"), 1, WAIT)[0].len(), 1, "log:\n{}", strait.log_text());
    assert!(!topic_names(&s.west).contains(&format!("us-east.{looped}")), "strait log:\n{}", strait.log_text());
}

#[test]
fn new_topics_and_new_partitions_are_picked_up_while_running() {
    let s = stand();
    let base = unique("discover");
    let first = format!("{base}-a");
    create_topic(&s.east, &first, 1, 1, &[]);
    produce(&s.east, &first, &[TestRecord::kv(0, "k", "a0")], &[]);
    let strait = Strait::start(&east_to_west(&format!("{base}-.*"), ""));
    read_all(&s.west, &format!("us-east.{first}"), 1, WAIT);

    let second = format!("{base}-b");
    create_topic(&s.east, &second, 2, 1, &[]);
    produce(&s.east, &second, &[TestRecord::kv(0, "k", "b0"), TestRecord::kv(1, "k", "b1")], &[]);
    grow_topic(&s.east, &first, 3);
    produce(&s.east, &first, &[TestRecord::kv(2, "k", "a2")], &[]);

    let got_b = read_all(&s.west, &format!("us-east.{second}"), 2, WAIT);
    assert_eq!(got_b.iter().map(Vec::len).sum::<usize>(), 2, "strait log:\n{}", strait.log_text());
    assert!(
        wait_until(WAIT, || partition_count(&s.west, &format!("us-east.{first}")) == Some(3)),
        "remote topic grew to 3 partitions"
    );
    let got_a = read_all(&s.west, &format!("us-east.{first}"), 2, WAIT);
    assert_eq!(
        got_a[2].len(),
        1,
        "the record in the new partition arrived in the same partition; log:\n{}",
        strait.log_text()
    );
}
