//! A whole flow over and back, on clusters of the test's own so one can go down: the seed
//! scenario's 3-broker us-east and 1-broker us-west, a group moved to us-west by
//! `strait failover --flow` while us-east is down, a producer writing on us-west meanwhile, and
//! both moved home by `strait failback` once us-east is back. Group offset sync is off (MM2's
//! default), so the commands alone move the group.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::groups::*;
use crate::support::*;

const GROUP: &str = "orders-cg";

fn orders(prefix: &str, layout: &[usize]) -> Vec<TestRecord> {
    layout
        .iter()
        .enumerate()
        .flat_map(|(p, &n)| {
            (0..n).map(move |i| TestRecord::kv(p as i32, &format!("k{i}"), &format!("{prefix}-{p}-{i}")))
        })
        .collect()
}

fn values(reads: &[Read]) -> Vec<String> {
    let mut v: Vec<String> = reads.iter().map(|(_, _, v)| String::from_utf8_lossy(v).to_string()).collect();
    v.sort();
    v
}

fn sorted(records: impl IntoIterator<Item = TestRecord>) -> Vec<String> {
    let mut v: Vec<String> =
        records.into_iter().map(|r| String::from_utf8_lossy(&r.value.unwrap_or_default()).to_string()).collect();
    v.sort();
    v
}

/// `strait <args> --config <config>`: (success, stdout + stderr).
fn strait_on(config: &std::path::Path, args: &[&str]) -> (bool, String) {
    let config = config.to_string_lossy().to_string();
    let mut all = args.to_vec();
    all.extend_from_slice(&["--config", &config]);
    let (ok, out, err) = strait_cli(&all);
    (ok, format!("{out}{err}"))
}

#[test]
fn a_group_and_a_producer_fail_over_during_an_outage_of_us_east_and_come_home_skipping_and_re_reading_nothing() {
    // Four brokers of its own, us-east's three frozen and thawed: not beside other such tests.
    let _serial = one_at_a_time();
    let east = OwnCluster::start_brokers_to_freeze("dr-east", 3, 33092);
    let west = OwnCluster::start("dr-west", 34092);
    let (e, w) = (east.bootstrap.clone(), west.bootstrap.clone());
    create_topic(&e, "orders", 3, 3, &[("min.insync.replicas", "2")]);
    create_topic(&w, "orders", 3, 1, &[]);
    let seed = orders("east", &[67, 67, 66]);
    produce(&e, "orders", &seed, &[]);
    let strait = Strait::start(&format!(
        "clusters = us-east, us-west\nus-east.bootstrap.servers = {e}\nus-west.bootstrap.servers = {w}\n\
         us-east->us-west.enabled = true\nus-east->us-west.topics = orders\n\
         us-west->us-east.enabled = true\nus-west->us-east.topics = orders\n\
         replication.factor = 1\nrefresh.topics.interval.seconds = 1\nemit.checkpoints.interval.seconds = 1\n\
         sync.group.offsets.enabled = false\ngroups = {GROUP}\noffset.flush.interval.ms = 500\n"
    ));
    let config = strait.config_path().to_path_buf();
    assert!(
        wait_until(Duration::from_secs(90), || record_count(&w, "us-east.orders") == 200),
        "the seed crossed: log:\n{}",
        strait.log_text()
    );

    // The group reads 120 of the 200 orders on us-east; strait checkpoints it.
    let east_read = consume_as_group(&e, "orders", GROUP, 120);
    let committed = committed_offsets(&e, GROUP, "orders", 3);
    assert!(
        wait_until(Duration::from_secs(60), || {
            let mut latest = BTreeMap::new();
            for c in read_checkpoints(&w, "us-east.checkpoints.internal", GROUP) {
                latest.insert(c.partition, c.upstream);
            }
            // A partition the group has not read yet has no commit, and no checkpoint.
            (0..3).all(|p| committed[p as usize] < 0 || latest.get(&p) == Some(&committed[p as usize]))
        }),
        "checkpoints of {committed:?}; log:\n{}",
        strait.log_text()
    );

    // us-east goes down. The operator fails the whole flow over, from the checkpoints.
    east.freeze();
    let (ok, plan) = strait_on(&config, &["failover", "--flow", "us-east->us-west"]);
    assert!(ok, "{plan}");
    eprintln!("strait failover --flow us-east->us-west:\n{plan}");
    assert!(plan.contains("source unreachable") && plan.contains(GROUP) && plan.contains("dry run"), "{plan}");
    assert_eq!(committed_offsets(&w, GROUP, "us-east.orders", 3), vec![-1, -1, -1], "a dry run moves nothing");
    let (ok, applied) = strait_on(&config, &["failover", "--flow", "us-east->us-west", "--apply"]);
    assert!(ok && applied.contains(&format!("applied {GROUP}")), "{applied}");
    assert_eq!(committed_offsets(&w, GROUP, "us-east.orders", 3), committed, "a 1:1 copy resumes offset for offset");

    // On us-west the group reads the rest of the copy, and what a producer writes there now.
    let west_copy = consume_as_group(&w, "us-east.orders", GROUP, 80);
    let expected_rest: Vec<TestRecord> =
        seed.iter().filter(|r| east_read.iter().all(|(_, _, v)| Some(v) != r.value.as_ref())).cloned().collect();
    assert_eq!(values(&west_copy), sorted(expected_rest), "the 80 orders not read on us-east, each once");
    assert!(consume_to_lag_zero(&w, "us-east.orders", GROUP).is_empty(), "nothing more of the copy");
    let outage = orders("west", &[20, 20, 10]);
    produce(&w, "orders", &outage, &[]);
    let west_own = consume_as_group(&w, "orders", GROUP, 50);
    assert_eq!(values(&west_own), sorted(outage.clone()));

    // us-east is back: the way home copies what was written on us-west, and only that.
    east.thaw();
    assert!(
        wait_until(Duration::from_secs(120), || record_count(&e, "us-west.orders") == 50),
        "the outage's orders came home; log:\n{}",
        strait.log_text()
    );
    let (ok, plan) = strait_on(&config, &["failback", "--flow", "us-east->us-west"]);
    assert!(ok, "{plan}");
    eprintln!("strait failback --flow us-east->us-west:\n{plan}");
    assert!(plan.contains("names: prefixed") && plan.contains("`us-west.orders`") && plan.contains(GROUP), "{plan}");
    let (ok, applied) = strait_on(&config, &["failback", "--flow", "us-east->us-west", "--apply"]);
    assert!(ok && applied.contains(&format!("applied {GROUP}")), "{applied}");
    assert_eq!(committed_offsets(&e, GROUP, "orders", 3), vec![67, 67, 66], "everything read on us-west");
    assert_eq!(committed_offsets(&e, GROUP, "us-west.orders", 3), vec![20, 20, 10], "the outage's orders, read there");

    // Home again: the producer writes on us-east; the group reads exactly the new orders.
    let after = orders("home", &[10, 10, 10]);
    produce(&e, "orders", &after, &[]);
    let home = consume_as_group(&e, "orders", GROUP, 30);
    assert_eq!(values(&home), sorted(after.clone()), "only the new orders, none of the old read again");
    assert!(consume_to_lag_zero(&e, "orders", GROUP).is_empty());
    assert!(consume_to_lag_zero(&e, "us-west.orders", GROUP).is_empty(), "the outage's orders are not read twice");

    // Every record where the operator expects it: us-east's orders copied to us-west, us-west's
    // outage orders copied home once, and nothing sent back where it came from.
    assert!(
        wait_until(Duration::from_secs(90), || record_count(&w, "us-east.orders") == 230),
        "us-east.orders on us-west"
    );
    assert_eq!(record_count(&e, "orders"), 230);
    assert_eq!(record_count(&w, "orders"), 50);
    assert_eq!(record_count(&e, "us-west.orders"), 50);
    for (cluster, name) in [(&e, "us-west.us-east.orders"), (&w, "us-east.us-west.orders"), (&e, "us-east.orders")] {
        assert!(!topic_names(cluster).contains(&name.to_string()), "{name} exists: a record went back");
    }
    for flow in ["us-east->us-west", "us-west->us-east"] {
        let (ok, out) = strait_on(&config, &["verify", "--flow", flow]);
        assert!(ok && out.contains("CLEAN"), "{flow}: {out}");
    }
}
