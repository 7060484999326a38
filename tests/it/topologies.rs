//! Topologies on clusters of their own: hub-and-spoke (`examples/hub-and-spoke`) on four
//! single-broker clusters, and active-active with `topics = .*` on two, where every topic of a
//! cluster is replicated and only the cycle check keeps copies from coming back.

use std::time::Duration;

use crate::support::groups::{consume_as_group, read_checkpoints};
use crate::support::*;
use strait_core::offsets::mm2::Checkpoint;

/// Starts fresh single-broker clusters, one per `(name, port)`, and returns their bootstraps.
fn fresh_clusters(clusters: &[(&str, u16)]) -> Vec<String> {
    // One at a time: several JVMs starting at once on two cores time each other out.
    clusters.iter().map(|(name, port)| kafka_sh(&["start", "--fresh", name, "1", &port.to_string()])).collect()
}

fn stop_clusters(clusters: &[(&str, u16)]) {
    for (name, _) in clusters {
        kafka_sh(&["stop", name]);
    }
}

/// The newest checkpoint of `group` in `checkpoints_topic`, waiting for one to appear.
fn wait_checkpoint(bootstrap: &str, checkpoints_topic: &str, group: &str) -> Checkpoint {
    let mut newest = None;
    wait_until(Duration::from_secs(60), || {
        newest = read_checkpoints(bootstrap, checkpoints_topic, group).into_iter().last();
        newest.is_some()
    });
    newest.unwrap_or_else(|| panic!("no checkpoint of {group} in {checkpoints_topic} within 60 s"))
}

#[test]
fn hub_and_spoke_fans_orders_in_and_config_out_with_checkpoints_and_heartbeats_for_every_pair() {
    // Four clusters of its own load both cores while they start: tests that time a gap wait.
    let _serial = one_at_a_time();
    let clusters = [("hub", 21092), ("r1", 22092), ("r2", 23092), ("r3", 24092)];
    let bootstraps = fresh_clusters(&clusters);
    let (hub, regions) = (&bootstraps[0], &bootstraps[1..]);
    for r in regions {
        create_topic(r, "orders", 3, 1, &[]);
    }
    create_topic(hub, "config", 1, 1, &[]);
    let config = std::fs::read_to_string(repo_root().join("examples/hub-and-spoke/mm2.properties")).expect("example");
    let strait = Strait::start(&format!(
        "{config}\nrefresh.topics.interval.seconds = 1\nemit.checkpoints.interval.seconds = 1\n"
    ));

    for (i, r) in regions.iter().enumerate() {
        let records: Vec<TestRecord> =
            (0..30).map(|n| TestRecord::kv(n % 3, &format!("o{n}"), &format!("r{}-{n}", i + 1))).collect();
        produce(r, "orders", &records, &[]);
    }
    let settings: Vec<TestRecord> = (0..10).map(|n| TestRecord::kv(0, &format!("s{n}"), &format!("v{n}"))).collect();
    produce(hub, "config", &settings, &[]);

    // Fan-in: each region's orders under its own prefix on the hub.
    for (i, _) in regions.iter().enumerate() {
        let copy = format!("r{}.orders", i + 1);
        let got = read_all(hub, &copy, 30, Duration::from_secs(90));
        assert_eq!(got.iter().map(Vec::len).sum::<usize>(), 30, "{copy} on the hub; log:\n{}", strait.log_text());
        assert!(got
            .iter()
            .flatten()
            .all(|r| r.value.as_deref().is_some_and(|v| v.starts_with(format!("r{}-", i + 1).as_bytes()))));
    }
    // Fan-out: the hub's config in every region, in order.
    for r in regions {
        let got = read_all(r, "hub.config", 10, Duration::from_secs(90));
        assert_eq!(
            got[0].iter().map(|g| g.value.clone()).collect::<Vec<_>>(),
            settings.iter().map(|s| s.value.clone()).collect::<Vec<_>>()
        );
    }

    // Checkpoints for every pair: a group on each source, checkpointed on its target.
    for (i, r) in regions.iter().enumerate() {
        let alias = format!("r{}", i + 1);
        consume_as_group(r, "orders", "orders-cg", 30);
        let c = wait_checkpoint(hub, &format!("{alias}.checkpoints.internal"), "orders-cg");
        assert_eq!(c.topic, format!("{alias}.orders"), "{alias}->hub checkpoint: {c:?}");
    }
    consume_as_group(hub, "config", "config-cg", 10);
    for (i, r) in regions.iter().enumerate() {
        let c = wait_checkpoint(r, "hub.checkpoints.internal", "config-cg");
        assert!(c.topic == "hub.config" && c.downstream == 10, "hub->r{} checkpoint: {c:?}", i + 1);
    }
    // Heartbeats for every pair, on each target.
    for (i, r) in regions.iter().enumerate() {
        let alias = format!("r{}", i + 1);
        assert!(newest_heartbeat(hub, "heartbeats", &alias, "hub").is_some(), "{alias}->hub heartbeat on the hub");
        assert!(newest_heartbeat(r, "heartbeats", "hub", &alias).is_some(), "hub->{alias} heartbeat on {alias}");
    }
    // Six flows, and still four stage threads plus the two periodic ones.
    let threads = thread_names(strait.child.id());
    println!("{} threads in all, librdkafka's included", threads.len());
    let stage_threads = threads.iter().filter(|t| t.starts_with("stages ")).count();
    assert_eq!(stage_threads, 4, "stage threads of six flows: {threads:?}");
    assert_eq!(threads.iter().filter(|t| *t == "periodic" || *t == "checkpoints").count(), 2, "{threads:?}");
    // The names a thread per flow stage had ("fetch us-east->us-west", ...).
    let per_flow = ["fetch ", "filter ", "transform ", "produce "];
    assert!(
        !threads.iter().any(|t| per_flow.iter().any(|p| t.starts_with(p))),
        "no thread per flow stage: {threads:?}"
    );
    drop(strait);
    stop_clusters(&clusters);
}

/// The names of a process's threads.
fn thread_names(pid: u32) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the strait process is running");
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect()
}

#[test]
fn active_active_with_every_topic_replicated_never_loops() {
    let _serial = one_at_a_time();
    let clusters = [("aa-east", 25092), ("aa-west", 26092)];
    let bootstraps = fresh_clusters(&clusters);
    let (east, west) = (&bootstraps[0], &bootstraps[1]);
    create_topic(east, "orders", 3, 1, &[]);
    create_topic(west, "orders", 3, 1, &[]);
    let strait = Strait::start(&format!(
        "clusters = aa-east, aa-west\naa-east.bootstrap.servers = {east}\naa-west.bootstrap.servers = {west}\n\
         aa-east->aa-west.enabled = true\naa-west->aa-east.enabled = true\ntopics = .*\nreplication.factor = 1\n\
         checkpoints.topic.replication.factor = 1\nheartbeats.topic.replication.factor = 1\noffset-syncs.topic.replication.factor = 1\n\
         offset.storage.replication.factor = 1\nrefresh.topics.interval.seconds = 1\n"
    ));
    let records = |region: &str| -> Vec<TestRecord> {
        (0..50).map(|n| TestRecord::kv(n % 3, &format!("k{n}"), &format!("{region}-{n}"))).collect()
    };
    produce(west, "orders", &records("west"), &[]);
    produce(east, "orders", &records("east"), &[]);
    let on_east = read_all(east, "aa-west.orders", 50, Duration::from_secs(90));
    let on_west = read_all(west, "aa-east.orders", 50, Duration::from_secs(90));
    assert_eq!(on_east.iter().map(Vec::len).sum::<usize>(), 50, "50 of 50 from aa-west; log:\n{}", strait.log_text());
    assert_eq!(on_west.iter().map(Vec::len).sum::<usize>(), 50, "50 of 50 from aa-east");
    // Heartbeats travel on as `<alias>.heartbeats`.
    assert!(wait_until(Duration::from_secs(60), || topic_names(west).contains(&"aa-east.heartbeats".to_string())));
    // Sentinels: a topic made on each side now is mirrored by a later discovery round of each
    // flow, after every round that could have sent a topic back.
    for (from, to, alias) in [(east, west, "aa-east"), (west, east, "aa-west")] {
        create_topic(from, "late", 1, 1, &[]);
        produce(from, "late", &[TestRecord::kv(0, "k", "v")], &[]);
        let arrived = read_all(to, &format!("{alias}.late"), 1, Duration::from_secs(90));
        assert_eq!(arrived[0].len(), 1, "{alias}.late never arrived; log:\n{}", strait.log_text());
    }
    for (bootstrap, name) in [(east, "aa-east"), (west, "aa-west")] {
        let looped: Vec<String> = topic_names(bootstrap)
            .into_iter()
            .filter(|t| {
                t.starts_with("aa-east.aa-west.")
                    || t.starts_with("aa-west.aa-east.")
                    || t.starts_with(&format!("{name}."))
            })
            .collect();
        assert!(looped.is_empty(), "{name} has topics that came back to it: {looped:?}");
    }
    assert_eq!(record_count(east, "orders"), 50);
    assert_eq!(record_count(west, "orders"), 50);
    drop(strait);
    stop_clusters(&clusters);
}
