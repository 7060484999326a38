//! Several strait processes on one config are one replicator: a flow's tasks are shared through
//! a consumer group on the target, and a process that dies hands its share to the others.

mod support;

use std::time::{Duration, Instant};

use support::*;

const FLOW: &str = "us-east->us-west";
const PARTITIONS: i32 = 6;
/// The group's session timeout in these tests (the broker's minimum).
const SESSION: Duration = Duration::from_secs(6);
const RECORDS: u64 = 500_000;

fn config(topic: &str) -> String {
    east_to_west(topic, &format!("tasks.max = {PARTITIONS}\nstrait.group.session.timeout.ms = {}\noffset.flush.interval.ms = 500\n", SESSION.as_millis()))
}

/// Source partitions the process reads.
fn share(strait: &Strait) -> f64 {
    strait.metric("strait_source_partitions_assigned", &[("flow", FLOW)]).unwrap_or(0.0)
}

/// Whether every member reads some partitions and together they read each of them once.
fn split(members: &[Strait]) -> bool {
    members.iter().all(|m| share(m) >= 1.0) && members.iter().map(share).sum::<f64>() == f64::from(PARTITIONS)
}

fn logs(members: &[Strait]) -> String {
    members.iter().enumerate().map(|(i, m)| format!("--- member {i}:\n{}", m.log_text())).collect()
}

#[test]
fn three_processes_share_a_flow_and_a_kill_9_hands_its_share_to_the_others_losing_nothing() {
    let _serial = one_at_a_time();
    let s = stand();
    let topic = unique("scale-out");
    create_topic(&s.east, &topic, PARTITIONS, 1, &[]);
    let remote = format!("us-east.{topic}");
    let cfg = config(&topic);
    let mut members: Vec<Strait> = (0..3).map(|_| Strait::start(&cfg)).collect();

    assert!(wait_until(Duration::from_secs(90), || split(&members)), "the members never split the 6 partitions; logs:\n{}", logs(&members));
    let shares: Vec<f64> = members.iter().map(share).collect();
    println!("shares of the 6 partitions: {shares:?}");

    let producer = SteadyProducer::start(&s.east, &topic, PARTITIONS, 20_000, 100);
    assert!(
        wait_until(Duration::from_secs(120), || record_count(&s.west, &remote) >= 100_000),
        "100,000 records never arrived; logs:\n{}",
        logs(&members)
    );
    members[2].kill9();
    let killed = Instant::now();
    assert!(
        wait_until(Duration::from_secs(60), || members[..2].iter().map(share).sum::<f64>() == f64::from(PARTITIONS)),
        "the survivors never took over every partition; logs:\n{}",
        logs(&members[..2])
    );
    let moved = killed.elapsed();
    println!("after kill -9 of a member the survivors owned every partition in {moved:?} (session timeout {SESSION:?})");
    assert!(moved <= SESSION + Duration::from_secs(15), "took {moved:?}");

    assert!(wait_until(Duration::from_secs(120), || producer.sent() >= RECORDS), "the source producer fell behind");
    let total = producer.finish();
    let settled = settled_count(&s.west, &remote, total as i64, Duration::from_secs(240))
        .unwrap_or_else(|| panic!("{} of {total} arrived; logs:\n{}", record_count(&s.west, &remote), logs(&members[..2])));
    let got = read_all(&s.west, &remote, settled as usize, Duration::from_secs(240));
    let check = check_seqs(got.iter().flatten(), total);
    println!("{total} produced, {settled} on the target: {} duplicates (sent again after the kill)", check.duplicates);
    assert_eq!(check.missing, 0, "lost records, the first {:?}", check.first_missing);
    assert_eq!(check.foreign, 0);
    // Three processes copying everything would triple it; only what the dead one had in flight comes twice.
    assert!(check.duplicates < (total / 3) as usize, "{} duplicates for {total} records: more than the dead member's share", check.duplicates);
}

#[test]
fn a_second_process_on_the_same_config_shares_the_work_instead_of_copying_it() {
    let _serial = one_at_a_time();
    let s = stand();
    let topic = unique("two-members");
    create_topic(&s.east, &topic, PARTITIONS, 1, &[]);
    let remote = format!("us-east.{topic}");
    let cfg = config(&topic);
    let first = Strait::start(&cfg);
    assert!(wait_until(Duration::from_secs(60), || share(&first) == f64::from(PARTITIONS)), "log:\n{}", first.log_text());
    let second = Strait::start(&cfg);
    let members = [first, second];
    assert!(wait_until(Duration::from_secs(60), || split(&members)), "the second process never got a share; logs:\n{}", logs(&members));

    let records: Vec<TestRecord> = (0..60_000u64).map(|i| TestRecord::kv((i % PARTITIONS as u64) as i32, &i.to_string(), &seq_value(i, 50))).collect();
    produce(&s.east, &topic, &records, &[]);
    let settled = settled_count(&s.west, &remote, 60_000, Duration::from_secs(120))
        .unwrap_or_else(|| panic!("{} of 60000 arrived; logs:\n{}", record_count(&s.west, &remote), logs(&members)));
    assert_eq!(settled, 60_000, "each record once, not once per process; logs:\n{}", logs(&members));
}

#[test]
fn a_rolling_restart_with_static_membership_moves_no_task_and_loses_nothing() {
    let _serial = one_at_a_time();
    let s = stand();
    let topic = unique("rolling");
    create_topic(&s.east, &topic, PARTITIONS, 1, &[]);
    let remote = format!("us-east.{topic}");
    let cfg = config(&topic);
    let ids = [unique("member-a"), unique("member-b")];
    let mut members: Vec<Strait> = ids.iter().map(|id| Strait::start_args(&cfg, &["--instance-id", id])).collect();
    assert!(wait_until(Duration::from_secs(60), || split(&members)), "the two members never split the work; logs:\n{}", logs(&members));

    let producer = SteadyProducer::start(&s.east, &topic, PARTITIONS, 5_000, 100);
    let mut longest_unowned = Duration::ZERO;
    for i in 0..members.len() {
        let other = 1 - i;
        let other_share = share(&members[other]);
        members[i].signal("TERM");
        assert!(members[i].wait_exit(Duration::from_secs(40)).is_some(), "member {i} did not stop; log:\n{}", members[i].log_text());
        members[i] = Strait::start_args(&cfg, &["--instance-id", &ids[i]]);
        // The restarted member takes its own tasks back; the other keeps exactly its own.
        let mut unowned_since: Option<Instant> = Some(Instant::now());
        let back = wait_until(Duration::from_secs(60), || {
            let whole = share(&members[i]) >= 1.0 && share(&members[other]) + share(&members[i]) == f64::from(PARTITIONS);
            if whole {
                if let Some(since) = unowned_since.take() {
                    longest_unowned = longest_unowned.max(since.elapsed());
                }
            }
            assert_eq!(share(&members[other]), other_share, "static membership: the other member's tasks must not move");
            whole
        });
        assert!(back, "member {i} never got its tasks back; logs:\n{}", logs(&members));
    }
    println!("a restarted static member's partitions went unread for at most {longest_unowned:?} (session timeout {SESSION:?})");
    assert!(longest_unowned <= SESSION + Duration::from_secs(20), "{longest_unowned:?}");

    let total = producer.finish();
    let settled = settled_count(&s.west, &remote, total as i64, Duration::from_secs(180))
        .unwrap_or_else(|| panic!("{} of {total} arrived; logs:\n{}", record_count(&s.west, &remote), logs(&members)));
    let got = read_all(&s.west, &remote, settled as usize, Duration::from_secs(180));
    let check = check_seqs(got.iter().flatten(), total);
    println!("{total} produced, {settled} on the target after a rolling restart: {} duplicates", check.duplicates);
    assert_eq!(check.missing, 0, "lost records, the first {:?}", check.first_missing);
}

#[test]
fn only_the_owner_of_task_0_writes_heartbeats() {
    let _serial = one_at_a_time();
    let s = stand();
    let topic = unique("beats");
    create_topic(&s.east, &topic, PARTITIONS, 1, &[]);
    let cfg = config(&topic);
    let members: Vec<Strait> = (0..3).map(|_| Strait::start(&cfg)).collect();
    assert!(wait_until(Duration::from_secs(90), || split(&members)), "logs:\n{}", logs(&members));
    let beats = |m: &Strait| metric_sum(&m.metrics(), "strait_heartbeats_sent_total");
    let before: Vec<f64> = members.iter().map(beats).collect();
    // A window that ends when five heartbeats were written, so a member writing none is seen
    // over a window in which heartbeats did flow.
    let started = Instant::now();
    let delta = |members: &[Strait]| -> Vec<f64> { members.iter().zip(&before).map(|(m, b)| beats(m) - b).collect() };
    assert!(wait_until(Duration::from_secs(30), || delta(&members).iter().sum::<f64>() >= 5.0), "no heartbeats; logs:\n{}", logs(&members));
    let window = started.elapsed();
    let during = delta(&members);
    println!("heartbeats per member in {window:?}: {during:?}");
    assert!(during.iter().sum::<f64>() <= window.as_secs_f64() + 2.0, "about one a second: {during:?} in {window:?}");
    assert_eq!(during.iter().filter(|n| **n > 0.0).count(), 1, "one member writes the flow's heartbeats: {during:?}");
}
