//! `strait failover` and `strait status` against real clusters: the RPO a failover would cost,
//! `--apply` on an idle group only, and per-flow heartbeat age and lag.

use std::time::Duration;

use crate::support::groups::*;
use crate::support::*;

#[test]
fn failover_shows_the_rpo_and_applies_positions_only_to_an_idle_group() {
    let s = stand();
    let topic = unique("orders");
    create_topic(&s.east, &topic, 3, 3, &[("min.insync.replicas", "2")]);
    produce(
        &s.east,
        &topic,
        &(0..200).map(|i| TestRecord::kv(i % 3, &format!("k{i}"), &format!("order-{i}"))).collect::<Vec<_>>(),
        &[],
    );
    let group = unique("orders-cg");
    // Group sync off: here the operator moves the group.
    let mut strait =
        Strait::start(&east_to_west(&topic, &format!("groups = {group}\nsync.group.offsets.enabled = false")));
    let remote = format!("us-east.{topic}");
    assert!(
        wait_until(Duration::from_secs(90), || record_count(&s.west, &remote) == 200),
        "log:\n{}",
        strait.log_text()
    );
    consume_as_group(&s.east, &topic, &group, 120);
    let upstream = committed_offsets(&s.east, &group, &topic, 3);
    // strait stops (positions stored); 30 more orders arrive that nobody replicates.
    strait.stop();
    let unix_s = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64();
    let produce_began = unix_s();
    produce(
        &s.east,
        &topic,
        &(200..230).map(|i| TestRecord::kv(i % 3, &format!("k{i}"), &format!("order-{i}"))).collect::<Vec<_>>(),
        &[],
    );
    let produce_ended = unix_s();

    let config = strait.config_path().to_str().expect("utf-8 path").to_string();
    let args = ["failover", "--config", &config, "--group", &group, "--from", "us-east", "--to", "us-west"];
    let (ok, out, err) = strait_cli(&args);
    assert!(ok, "{err}");
    assert!(out.contains("RPO: 30 record(s) not replicated yet, the oldest written"), "{out}");
    assert!(out.contains("dry run"), "{out}");
    assert_eq!(committed_offsets(&s.west, &group, &remote, 3), vec![-1, -1, -1], "a dry run commits nothing");
    // Each row: target topic, partition, upstream, resume at. A 1:1 copy resumes at the commit.
    for (p, offset) in upstream.iter().enumerate().filter(|(_, o)| **o >= 0) {
        let row = remote.to_string();
        assert!(
            out.lines().any(|l| l.starts_with(&row)
                && l.split_whitespace().collect::<Vec<_>>()[1..]
                    == [p.to_string(), offset.to_string(), offset.to_string()]),
            "partition {p} should resume at {offset}:\n{out}"
        );
    }

    // A consumer of the group is active on us-west: --apply refuses.
    let busy = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &s.west)
        .set("group.id", &group)
        .create::<rdkafka::consumer::BaseConsumer>()
        .expect("consumer");
    rdkafka::consumer::Consumer::subscribe(&busy, &[remote.as_str()]).expect("subscribe");
    assert!(wait_until(Duration::from_secs(30), || {
        let _ = busy.poll(Duration::from_millis(100));
        rdkafka::consumer::Consumer::assignment(&busy).map(|a| a.count() > 0).unwrap_or(false)
    }));
    let mut apply = args.to_vec();
    apply.push("--apply");
    let (ok, _, err) = strait_cli(&apply);
    assert!(!ok && err.contains("active member"), "{err}");
    drop(busy);

    assert!(wait_until(Duration::from_secs(30), || strait_cli(&apply).0), "apply never succeeded on the idle group");
    assert_eq!(committed_offsets(&s.west, &group, &remote, 3), upstream);

    let status_began = unix_s();
    let (ok, out, err) = strait_cli(&["status", "--config", &config]);
    let status_ended = unix_s();
    assert!(ok, "{err}");
    let row = out.lines().find(|l| l.starts_with("us-east->us-west")).unwrap_or_else(|| panic!("{out}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert!(cols[1].parse::<f64>().is_ok(), "heartbeat age: {row}");
    assert_eq!(cols[3], "30", "lag in records: {row}");
    // The lag in seconds is the age of the oldest unreplicated record, the first of the 30: it
    // was written while they were produced and aged until status looked. 0.1 s either side for
    // the column's one decimal and the timestamps' milliseconds.
    let (least, most) = (status_began - produce_ended - 0.1, status_ended - produce_began + 0.1);
    let seconds = cols[4].parse::<f64>().unwrap_or_else(|e| panic!("lag in seconds ({e}): {row}"));
    println!("lag in seconds {seconds}, between {least:.2} and {most:.2}");
    assert!(least <= seconds && seconds <= most, "lag in seconds {seconds}, not within [{least:.2}, {most:.2}]: {row}");
}
