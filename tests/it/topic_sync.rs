//! What follows the source besides records: topic configs at creation and after, compacted
//! topics with tombstones, and topic ACLs.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::support::*;
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use strait_core::cluster::ClusterAdmin;
use strait_core::config::{ClientSettings, ClusterAlias, ClusterConfig};

const WAIT: Duration = Duration::from_secs(90);

/// Changes a source topic's configs with Kafka's own tool, as an operator would.
fn kafka_configs(bootstrap: &str, topic: &str, args: &[&str]) {
    let mut all = vec![
        "kafka.admin.ConfigCommand",
        "--bootstrap-server",
        bootstrap,
        "--alter",
        "--entity-type",
        "topics",
        "--entity-name",
        topic,
    ];
    all.extend_from_slice(args);
    kafka_sh(&[&["tool"], &all[..]].concat());
}

/// Every record of `topic` up to its end, in log order per partition: (key, value).
fn read_log(bootstrap: &str, topic: &str, partitions: i32) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let c = consumer(bootstrap);
    let mut tpl = TopicPartitionList::new();
    let mut ends = HashMap::new();
    for p in 0..partitions {
        let (_, high) = c.fetch_watermarks(topic, p, Duration::from_secs(10)).expect("watermarks");
        ends.insert(p, high);
        tpl.add_partition_offset(topic, p, Offset::Beginning).expect("tpl");
    }
    c.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    let mut done: HashMap<i32, bool> = ends.iter().map(|(p, high)| (*p, *high == 0)).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while done.values().any(|d| !d) {
        assert!(std::time::Instant::now() < deadline, "{topic} was not read to its end within 60 s");
        let Some(Ok(m)) = c.poll(Duration::from_millis(200)) else { continue };
        out.push((m.key().unwrap_or_default().to_vec(), m.payload().map(<[u8]>::to_vec)));
        if m.offset() + 1 >= ends[&m.partition()] {
            done.insert(m.partition(), true);
        }
    }
    out
}

/// The latest value of every key that has one (a tombstone removes the key).
fn latest(log: &[(Vec<u8>, Option<Vec<u8>>)]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (k, v) in log {
        let key = String::from_utf8_lossy(k).into_owned();
        match v {
            Some(v) => out.insert(key, String::from_utf8_lossy(v).into_owned()),
            None => out.remove(&key),
        };
    }
    out
}

#[test]
fn remote_topics_are_created_with_the_source_configs_and_follow_later_changes() {
    let s = stand();
    let topic = unique("configs");
    create_topic(
        &s.east,
        &topic,
        2,
        3,
        &[
            ("cleanup.policy", "compact"),
            ("retention.ms", "123456789"),
            ("retention.bytes", "1000000"),
            ("min.insync.replicas", "2"),
        ],
    );
    let remote = format!("us-east.{topic}");

    // Without the periodic sync, the remote topic still starts with the source's configs.
    let mut first = Strait::start(&east_to_west(&topic, "sync.topic.configs.enabled = false\n"));
    assert!(wait_until(WAIT, || partition_count(&s.west, &remote) == Some(2)), "log:\n{}", first.log_text());
    let created = topic_level_configs(&s.west, &remote);
    assert_eq!(created.get("cleanup.policy").map(String::as_str), Some("compact"), "{created:?}");
    assert_eq!(created.get("retention.ms").map(String::as_str), Some("123456789"), "{created:?}");
    assert_eq!(created.get("retention.bytes").map(String::as_str), Some("1000000"), "{created:?}");
    assert!(
        !created.contains_key("min.insync.replicas"),
        "MM2's exclude list keeps min.insync.replicas off a 1-broker target: {created:?}"
    );
    first.stop();

    // With it, a changed key and a deleted one follow: the deleted one falls back to the target's default.
    let second = Strait::start(&east_to_west(&topic, "sync.topic.configs.interval.seconds = 1\n"));
    kafka_configs(&s.east, &topic, &["--add-config", "retention.ms=555000", "--delete-config", "retention.bytes"]);
    let followed = wait_until(WAIT, || {
        let now = topic_level_configs(&s.west, &remote);
        now.get("retention.ms").map(String::as_str) == Some("555000") && !now.contains_key("retention.bytes")
    });
    assert!(followed, "target configs: {:?}\nlog:\n{}", topic_level_configs(&s.west, &remote), second.log_text());
    let bytes = topic_config_entries(&s.west, &remote).into_iter().find(|e| e.name == "retention.bytes");
    assert_eq!(bytes.and_then(|e| e.value).as_deref(), Some("-1"), "retention.bytes is back at the target's default");
    let now = topic_level_configs(&s.west, &remote);
    assert_eq!(now.get("cleanup.policy").map(String::as_str), Some("compact"), "keys not changed stay: {now:?}");
    assert!(second.log_text().contains("topic configs synced from the source"), "log:\n{}", second.log_text());
}

#[test]
fn a_compacted_topic_with_tombstones_keeps_the_same_latest_value_per_key_on_both_clusters() {
    let s = stand();
    let topic = unique("compacted");
    let compacting = [
        ("cleanup.policy", "compact"),
        ("segment.ms", "100"),
        ("min.cleanable.dirty.ratio", "0.001"),
        ("delete.retention.ms", "100"),
    ];
    create_topic(&s.east, &topic, 2, 3, &compacting);
    let kv = |p: i32, k: usize, v: Option<String>| TestRecord {
        value: v.map(String::into_bytes),
        ..TestRecord::kv(p, &format!("key-{k}"), "")
    };
    // Keys go to partition k % 2 so each key stays in one partition.
    let round = |keys: std::ops::Range<usize>, value: &dyn Fn(usize) -> Option<String>| -> Vec<TestRecord> {
        keys.map(|k| kv((k % 2) as i32, k, value(k))).collect()
    };
    let mut produced = 0;
    for batch in [
        round(0..60, &|k| Some(format!("v0-{k}"))),
        [round(0..20, &|_| None), round(20..40, &|k| Some(format!("v1-{k}")))].concat(),
        round(40..60, &|k| Some(format!("v2-{k}"))),
    ] {
        produced += batch.len();
        produce(&s.east, &topic, &batch, &[]);
        std::thread::sleep(Duration::from_millis(300)); // lets segment.ms roll a segment per round
    }
    produce(&s.east, &topic, &[TestRecord::kv(0, "roll-0", "r"), TestRecord::kv(1, "roll-1", "r")], &[]);
    produced += 2;
    assert!(
        wait_until(Duration::from_secs(120), || read_log(&s.east, &topic, 2).len() < produced),
        "the log cleaner never compacted {topic} (is log.cleaner.backoff.ms low on the stand?)"
    );

    let remote = format!("us-east.{topic}");
    let strait = Strait::start(&east_to_west(&topic, ""));
    // Live changes while replicating: new tombstones, and keys brought back after theirs.
    produce(&s.east, &topic, &[round(20..30, &|_| None), round(0..6, &|k| Some(format!("v3-{k}")))].concat(), &[]);
    produce(&s.east, &topic, &[TestRecord::kv(0, "sentinel", "end")], &[]);
    let arrived = wait_until(WAIT, || {
        partition_count(&s.west, &remote) == Some(2) && latest(&read_log(&s.west, &remote, 2)).contains_key("sentinel")
    });
    assert!(arrived, "the sentinel never arrived; log:\n{}", strait.log_text());
    let source_view = latest(&read_log(&s.east, &topic, 2));
    assert_eq!(
        latest(&read_log(&s.west, &remote, 2)),
        source_view,
        "latest value per key differs between the clusters"
    );
    assert!(
        !source_view.contains_key("key-25") && source_view.get("key-3").map(String::as_str) == Some("v3-3"),
        "{source_view:?}"
    );
    let remote_configs = topic_level_configs(&s.west, &remote);
    assert_eq!(remote_configs.get("cleanup.policy").map(String::as_str), Some("compact"), "{remote_configs:?}");

    // Compacted on the target too (its configs came from the source), the view stays the same.
    let written: i64 = record_count(&s.west, &remote);
    std::thread::sleep(Duration::from_millis(200)); // past segment.ms, so the next record rolls a segment
    produce(&s.east, &topic, &[TestRecord::kv(0, "roll-0", "r2"), TestRecord::kv(1, "roll-1", "r2")], &[]);
    assert!(
        wait_until(Duration::from_secs(120), || (read_log(&s.west, &remote, 2).len() as i64) < written),
        "the target never compacted {remote}; log:\n{}",
        strait.log_text()
    );
    let mut after = latest(&read_log(&s.west, &remote, 2));
    let mut expected = latest(&read_log(&s.east, &topic, 2));
    for view in [&mut after, &mut expected] {
        view.remove("roll-0");
        view.remove("roll-1");
    }
    assert_eq!(after, expected, "compaction on the target changed what a reader of the latest values sees");
}

#[test]
fn topic_acls_of_replicated_topics_follow_by_mm2_rules_and_nothing_else_is_copied() {
    use strait_core::cluster::{AclOperation, TopicAcl};
    let east = OwnCluster::start_with_authorizer("acl-east", 20092);
    let west = OwnCluster::start_with_authorizer("acl-west", 30092);
    for topic in ["orders", "sales.eu", "sales.us", "payments"] {
        create_topic(&east.bootstrap, topic, 1, 1, &[]);
    }
    let admin = |bootstrap: &str| {
        let cluster =
            ClusterConfig { alias: ClusterAlias::new("acl"), bootstrap_servers: bootstrap.to_string(), line: 0 };
        ClusterAdmin::connect(&cluster, &ClientSettings::default()).expect("admin client")
    };
    let acl = |topic: &str, prefixed: bool, who: &str, operation: AclOperation, allow: bool| TopicAcl {
        topic: topic.into(),
        prefixed,
        principal: format!("User:{who}"),
        host: "*".into(),
        operation,
        allow,
    };
    let (source, target) = (admin(&east.bootstrap), admin(&west.bootstrap));
    source
        .create_topic_acls(&[
            acl("orders", false, "alice", AclOperation::Read, true),
            acl("orders", false, "alice", AclOperation::Write, true),
            acl("orders", false, "bob", AclOperation::All, true),
            acl("orders", false, "carol", AclOperation::Write, false),
            acl("sales.", true, "dave", AclOperation::Describe, true),
            acl("payments", false, "alice", AclOperation::Read, true),
        ])
        .expect("source ACLs");
    let config = format!(
        "clusters = us-east, us-west\nus-east.bootstrap.servers = {}\nus-west.bootstrap.servers = {}\nus-east->us-west.enabled = true\n\
         us-east->us-west.topics = orders, sales\\\\..*\nreplication.factor = 1\nrefresh.topics.interval.seconds = 1\nsync.topic.acls.interval.seconds = 1\n",
        east.bootstrap, west.bootstrap
    );
    let strait = Strait::start(&config);
    let mut want = vec![
        acl("us-east.orders", false, "alice", AclOperation::Read, true),
        acl("us-east.orders", false, "bob", AclOperation::Read, true),
        acl("us-east.orders", false, "carol", AclOperation::Write, false),
        acl("us-east.sales.", true, "dave", AclOperation::Describe, true),
    ];
    let on_target = |target: &ClusterAdmin| {
        let mut now = target.topic_acls().expect("target ACLs");
        now.sort();
        now
    };
    let wait_for = |want: &mut Vec<TopicAcl>| {
        want.sort();
        assert!(
            wait_until(WAIT, || on_target(&target) == *want),
            "target ACLs {:?}\nlog:\n{}",
            on_target(&target),
            strait.log_text()
        );
    };
    wait_for(&mut want);

    // Sentinel: a binding added later arrives in a later round; the refused ones had every chance.
    source.create_topic_acls(&[acl("orders", false, "eve", AclOperation::Read, true)]).expect("a later ACL");
    want.push(acl("us-east.orders", false, "eve", AclOperation::Read, true));
    wait_for(&mut want);
    // Kafka's own tool reads the same bindings back.
    let listed = kafka_sh_stdout(&[
        "tool",
        "org.apache.kafka.tools.AclCommand",
        "--bootstrap-server",
        &west.bootstrap,
        "--list",
        "--topic",
        "us-east.orders",
    ]);
    assert!(
        listed.contains("User:bob") && listed.contains("operation=READ") && !listed.contains("operation=ALL"),
        "{listed}"
    );
    assert!(
        !listed.lines().any(|l| l.contains("operation=WRITE") && l.contains("permissionType=ALLOW")),
        "ALLOW WRITE is never copied:\n{listed}"
    );
}

#[test]
fn a_topic_the_target_refuses_holds_back_only_itself() {
    let s = stand();
    // Kafka allows 249 characters: this name fits on the source, and its remote name
    // (`us-east.` in front) does not fit on the target.
    let base = unique("a-refused");
    let refused = format!("{base}-{}", "x".repeat(245 - base.len()));
    let fine = unique("b-fine");
    for topic in [&refused, &fine] {
        create_topic(&s.east, topic, 1, 1, &[]);
        produce(&s.east, topic, &(0..20).map(|i| TestRecord::kv(0, "k", &i.to_string())).collect::<Vec<_>>(), &[]);
    }
    // The refused topic sorts first, so a round that stopped at it would never reach the other.
    let strait = Strait::start(&east_to_west(&format!("{refused}, {fine}"), ""));
    let remote = format!("us-east.{fine}");
    assert!(wait_until(WAIT, || record_count(&s.west, &remote) == 20), "log:\n{}", strait.log_text());
    let log = strait.log_text();
    assert!(
        log.contains(&format!("topic `{refused}` not replicated yet")),
        "the refused topic is reported by name:\n{log}"
    );
}
