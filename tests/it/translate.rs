//! `strait offsets translate`: where a group resumes on the other cluster, never past its place.

use std::process::Command;
use std::time::Duration;

use crate::support::*;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};

#[test]
fn a_group_at_120_of_200_translates_to_offsets_that_skip_nothing() {
    let s = stand();
    let orders = unique("orders");
    create_topic(&s.east, &orders, 3, 3, &[("min.insync.replicas", "2")]);
    let sent: Vec<TestRecord> =
        (0..200).map(|i| TestRecord::kv(i % 3, &format!("order-{i}"), &i.to_string())).collect();
    produce(&s.east, &orders, &sent, &[]);
    let config = east_to_west(&orders, "");
    let strait = Strait::start(&config);
    let remote = format!("us-east.{orders}");
    assert!(
        wait_until(Duration::from_secs(90), || record_count(&s.west, &remote) == 200),
        "log:\n{}",
        strait.log_text()
    );

    // orders-cg read 120 of the 200 records (40 per partition) and committed.
    let group = unique("orders-cg");
    let c: BaseConsumer =
        rdkafka::ClientConfig::new().set("bootstrap.servers", &s.east).set("group.id", &group).create().unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition_offset(&orders, p, rdkafka::Offset::Offset(40)).unwrap();
    }
    c.commit(&tpl, CommitMode::Sync).expect("commit");

    let dir = std::env::temp_dir().join("strait-tests");
    let path = dir.join(format!("{}.properties", unique("translate")));
    std::fs::write(&path, with_test_positions(&config)).unwrap();
    let mut rows = Vec::new();
    // The syncs of the last records may still be on their way: the first answers may be short.
    let exact = wait_until(Duration::from_secs(30), || {
        let out = Command::new(env!("CARGO_BIN_EXE_strait"))
            .args(["offsets", "translate", "--config"])
            .arg(&path)
            .args(["--group", &group, "--from", "us-east", "--to", "us-west"])
            .output()
            .expect("strait");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        rows = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with(&orders))
            .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .collect();
        rows.len() == 3 && rows.iter().all(|r| r.len() == 5 && r[4] == "40")
    });
    assert!(exact, "never translated to 40 on every partition: {rows:?}\nlog:\n{}", strait.log_text());
    for row in &rows {
        let (partition, committed, remote_topic): (i32, i64, &str) =
            (row[1].parse().unwrap(), row[2].parse().unwrap(), &row[3]);
        assert_eq!(committed, 40, "partition {partition}");
        // A 1:1 mirror: the record at upstream offset o sits at downstream offset o, and the
        // translation is exact, so the group resumes at 40 and re-reads nothing.
        assert_eq!(remote_topic, remote, "partition {partition}");
    }
}
