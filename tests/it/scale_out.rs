//! Several strait processes on one config are one replicator: a flow's tasks are shared through
//! a consumer group on the target, and a process that dies hands its share to the others.

use std::time::{Duration, Instant};

use crate::support::*;

const FLOW: &str = "us-east->us-west";
const PARTITIONS: i32 = 6;
/// The group's session timeout in these tests (the broker's minimum).
const SESSION: Duration = Duration::from_secs(6);
const RECORDS: u64 = 500_000;

fn config(topic: &str) -> String {
    east_to_west(
        topic,
        &format!(
            "tasks.max = {PARTITIONS}\nstrait.group.session.timeout.ms = {}\noffset.flush.interval.ms = 500\n",
            SESSION.as_millis()
        ),
    )
}

fn share(strait: &Strait) -> f64 {
    partitions_read(strait, FLOW)
}

/// Whether every member reads some partitions and together they read each of them once.
fn split(members: &[Strait]) -> bool {
    members.iter().all(|m| share(m) >= 1.0) && members.iter().map(share).sum::<f64>() == f64::from(PARTITIONS)
}

fn logs(members: &[Strait]) -> String {
    member_logs(members)
}

/// What a member killed under a steady load of `rate` records/s had in flight, owning `share` of
/// the 6 partitions: records of its partitions sent after its last stored position, at most its
/// share of the rate over one flush interval (0.5 s) plus the time the target takes to
/// acknowledge. Two seconds of its share bounds that; a member whose positions were not stored,
/// or a survivor that resumed from stale ones, would repeat far more.
fn in_flight_bound(rate: u64, share: f64) -> usize {
    (rate as f64 * share / f64::from(PARTITIONS) * 2.0) as usize
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

    assert!(
        wait_until(Duration::from_secs(90), || split(&members)),
        "the members never split the 6 partitions; logs:\n{}",
        logs(&members)
    );
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
    println!(
        "after kill -9 of a member the survivors owned every partition in {moved:?} (session timeout {SESSION:?})"
    );
    assert!(moved <= SESSION + Duration::from_secs(15), "took {moved:?}; logs:\n{}", logs(&members[..2]));

    assert!(wait_until(Duration::from_secs(120), || producer.sent() >= RECORDS), "the source producer fell behind");
    let total = producer.finish();
    let settled = settled_count(&s.west, &remote, total as i64, Duration::from_secs(240)).unwrap_or_else(|| {
        panic!("{} of {total} arrived; logs:\n{}", record_count(&s.west, &remote), logs(&members[..2]))
    });
    let got = read_all(&s.west, &remote, settled as usize, Duration::from_secs(240));
    let check = check_seqs(got.iter().flatten(), total);
    println!("{total} produced, {settled} on the target: {} duplicates (sent again after the kill)", check.duplicates);
    assert_eq!(check.missing, 0, "lost records, the first {:?}", check.first_missing);
    assert_eq!(check.foreign, 0);
    // Only what the dead member had in flight comes twice (see `in_flight_bound`).
    let bound = in_flight_bound(20_000, shares[2]);
    assert!(
        check.duplicates <= bound,
        "{} duplicates for {total} records: more than the dead member had in flight ({bound})",
        check.duplicates
    );
}

#[test]
fn at_least_once_with_two_processes_a_kill_9_repeats_only_what_the_dead_one_had_in_flight() {
    let _serial = one_at_a_time();
    let s = stand();
    let topic = unique("alo-kill");
    create_topic(&s.east, &topic, PARTITIONS, 1, &[]);
    let remote = format!("us-east.{topic}");
    let cfg = config(&topic);
    let mut members: Vec<Strait> = (0..2).map(|_| Strait::start(&cfg)).collect();
    assert!(
        wait_until(Duration::from_secs(90), || split(&members)),
        "the members never split the 6 partitions; logs:\n{}",
        logs(&members)
    );

    const RATE: u64 = 20_000;
    let producer = SteadyProducer::start(&s.east, &topic, PARTITIONS, RATE, 100);
    assert!(
        wait_until(Duration::from_secs(120), || record_count(&s.west, &remote) >= 100_000),
        "100,000 records never arrived; logs:\n{}",
        logs(&members)
    );
    let victim_share = share(&members[1]);
    members[1].kill9();
    assert!(
        wait_until(Duration::from_secs(60), || share(&members[0]) == f64::from(PARTITIONS)),
        "the survivor never took over every partition; log:\n{}",
        members[0].log_text()
    );
    assert!(wait_until(Duration::from_secs(120), || producer.sent() >= 300_000), "the source producer fell behind");
    let total = producer.finish();
    let settled = settled_count(&s.west, &remote, total as i64, Duration::from_secs(240)).unwrap_or_else(|| {
        panic!("{} of {total} arrived; log:\n{}", record_count(&s.west, &remote), members[0].log_text())
    });
    let got = read_all(&s.west, &remote, settled as usize, Duration::from_secs(240));
    let check = check_seqs(got.iter().flatten(), total);
    let bound = in_flight_bound(RATE, victim_share);
    println!("{total} produced; kill -9 of a member owning {victim_share} of 6 partitions: {} duplicates (bound {bound}), 0 lost", check.duplicates);
    assert_eq!(check.missing, 0, "lost records, the first {:?}", check.first_missing);
    assert_eq!(check.foreign, 0);
    assert!(
        check.duplicates <= bound,
        "{} duplicates: more than the dead member could have had in flight ({bound})",
        check.duplicates
    );
}

#[test]
fn a_frozen_member_that_lost_its_tasks_never_moves_a_stored_position_back() {
    let _serial = one_at_a_time();
    let s = stand();
    let topic = unique("zombie");
    create_topic(&s.east, &topic, PARTITIONS, 1, &[]);
    let remote = format!("us-east.{topic}");
    let cfg = config(&topic);
    let zombie = Strait::start(&cfg);
    assert!(
        wait_until(Duration::from_secs(60), || share(&zombie) == f64::from(PARTITIONS)),
        "log:\n{}",
        zombie.log_text()
    );
    let producer = SteadyProducer::start(&s.east, &topic, PARTITIONS, 5_000, 100);
    assert!(
        wait_until(Duration::from_secs(60), || record_count(&s.west, &remote) >= 20_000),
        "log:\n{}",
        zombie.log_text()
    );

    // Frozen, the member misses its session; the second takes every task and stores positions
    // well past the frozen one's, then the frozen one wakes with its old positions to store.
    let stored = |m: &Strait| m.metric("strait_positions_stored_total", &[("flow", FLOW)]).unwrap_or(0.0);
    let stored_before = stored(&zombie);
    zombie.signal("STOP");
    // Only lines the member writes after the pause count below: a refusal or fence from before
    // it (a rebalance at its start) says nothing about what the woken member does.
    assert!(
        wait_until(Duration::from_secs(10), || process_state(&zombie) == Some('T')),
        "the member did not stop on SIGSTOP"
    );
    let paused_at = zombie.log_text().len();
    let owner = Strait::start(&cfg);
    let moved = wait_until(Duration::from_secs(60), || share(&owner) == f64::from(PARTITIONS));
    let before = record_count(&s.west, &remote);
    let progressed = moved && wait_until(Duration::from_secs(60), || record_count(&s.west, &remote) >= before + 20_000);
    zombie.signal("CONT");
    assert!(moved && progressed, "the second member never took over; log:\n{}", owner.log_text());
    let members = [zombie, owner];
    assert!(
        wait_until(Duration::from_secs(60), || members.iter().map(share).sum::<f64>() == f64::from(PARTITIONS)),
        "the members never settled; logs:\n{}",
        logs(&members)
    );
    let zombie_log = members[0].log_text();
    let woken_log = zombie_log.get(paused_at..).unwrap_or_default();
    // Refused by the group coordinator (no longer a member), or fenced by the transaction
    // coordinator (the new owner initialised the position writer's id).
    let refused = woken_log.lines().find(|l| {
        [
            "positions not stored",
            "did not commit",
            "position writer failed",
            "without storing positions",
            "_FENCED",
            "fenced by a newer instance",
        ]
        .iter()
        .any(|m| l.contains(m))
    });
    // Or its last writes never completed (its clients stalled after the pause): then it stored
    // nothing more either, which the metric (counting committed writes only) shows.
    let stored_after = stored(&members[0]);
    println!("the woken member was refused: {refused:?}; positions it committed before the pause {stored_before}, after {stored_after}");
    assert!(
        refused.is_some() || stored_after == stored_before,
        "the woken member stored positions and was not refused; its log after the pause:\n{woken_log}"
    );

    let total = producer.finish();
    send_sentinels(&s.east, &topic, PARTITIONS);
    let parts = read_through_sentinels(&s.west, &remote, PARTITIONS, Duration::from_secs(180))
        .unwrap_or_else(|| panic!("logs:\n{}", logs(&members)));
    let check = check_seqs(parts.iter().flatten(), total);
    assert_eq!(check.missing, 0, "lost records, the first {:?}", check.first_missing);
    for (partition, history) in stored_positions(&s.west, &topic) {
        let nexts: Vec<i64> = history.iter().flatten().copied().collect();
        let back = nexts.windows(2).find(|w| w[1] < w[0]);
        assert_eq!(
            back,
            None,
            "partition {partition}: a stored position moved back (before, after) in {} writes",
            nexts.len()
        );
    }
    println!("{total} records, {} sent twice, no stored position moved back", check.duplicates);
}

/// The state letter of the process in `/proc/<pid>/stat` (`T` once stopped by a signal).
fn process_state(strait: &Strait) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", strait.child.id())).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
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
    assert!(
        wait_until(Duration::from_secs(60), || share(&first) == f64::from(PARTITIONS)),
        "log:\n{}",
        first.log_text()
    );
    let second = Strait::start(&cfg);
    let members = [first, second];
    assert!(
        wait_until(Duration::from_secs(60), || split(&members)),
        "the second process never got a share; logs:\n{}",
        logs(&members)
    );

    let records: Vec<TestRecord> = (0..60_000u64)
        .map(|i| TestRecord::kv((i % PARTITIONS as u64) as i32, &i.to_string(), &seq_value(i, 50)))
        .collect();
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
    assert!(
        wait_until(Duration::from_secs(60), || split(&members)),
        "the two members never split the work; logs:\n{}",
        logs(&members)
    );

    let producer = SteadyProducer::start(&s.east, &topic, PARTITIONS, 5_000, 100);
    let mut longest_unowned = Duration::ZERO;
    for i in 0..members.len() {
        let other = 1 - i;
        let other_share = share(&members[other]);
        members[i].signal("TERM");
        assert!(
            members[i].wait_exit(Duration::from_secs(40)).is_some(),
            "member {i} did not stop; log:\n{}",
            members[i].log_text()
        );
        members[i] = Strait::start_args(&cfg, &["--instance-id", &ids[i]]);
        // The restarted member takes its own tasks back; the other keeps exactly its own.
        let mut unowned_since: Option<Instant> = Some(Instant::now());
        let back = wait_until(Duration::from_secs(60), || {
            let whole =
                share(&members[i]) >= 1.0 && share(&members[other]) + share(&members[i]) == f64::from(PARTITIONS);
            if whole {
                if let Some(since) = unowned_since.take() {
                    longest_unowned = longest_unowned.max(since.elapsed());
                }
            }
            assert_eq!(
                share(&members[other]),
                other_share,
                "static membership: the other member's tasks must not move"
            );
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
    assert!(
        wait_until(Duration::from_secs(30), || delta(&members).iter().sum::<f64>() >= 5.0),
        "no heartbeats; logs:\n{}",
        logs(&members)
    );
    let window = started.elapsed();
    let during = delta(&members);
    println!("heartbeats per member in {window:?}: {during:?}");
    assert!(during.iter().sum::<f64>() <= window.as_secs_f64() + 2.0, "about one a second: {during:?} in {window:?}");
    assert_eq!(during.iter().filter(|n| **n > 0.0).count(), 1, "one member writes the flow's heartbeats: {during:?}");
}

#[test]
fn a_flow_with_more_tasks_than_its_widest_topic_has_partitions_says_which_to_set() {
    let s = stand();
    let topic = unique("idle-tasks");
    create_topic(&s.east, &topic, PARTITIONS, 1, &[]);
    // tasks.max left at its default, 12: tasks 6-11 can never have a partition of this topic.
    let strait = Strait::start(&east_to_west(&topic, ""));
    let told =
        wait_until(Duration::from_secs(60), || strait.metric("strait_tasks_idle", &[("flow", FLOW)]) == Some(6.0));
    let log = strait.log_text();
    assert!(told, "no strait_tasks_idle = 6; log:\n{log}");
    let line = log.lines().find(|l| l.contains("can never have a partition"));
    assert!(line.is_some_and(|l| l.contains("at most 6")), "the line names the fix: {line:?}");
    // This process owns every task, tasks 0-5 among them, so it has work: advice, not a warning.
    assert!(line.is_some_and(|l| !l.contains(" WARN ")), "a process with work does not warn: {line:?}");
}

/// The last line of `strait`'s log about tasks that can never have a partition: each start of
/// the flow's pipeline (each change of the tasks it owns) logs one.
fn last_idle_tasks_line(strait: &Strait) -> Option<String> {
    strait.log_text().lines().rfind(|l| l.contains("can never have a partition")).map(Into::into)
}

#[test]
fn only_a_process_given_nothing_but_empty_tasks_warns_about_tasks_max() {
    let _serial = one_at_a_time();
    let s = stand();
    let topic = unique("empty-tasks");
    create_topic(&s.east, &topic, 1, 1, &[]);
    // tasks.max left at its default, 12: only task 0 can have the topic's one partition, so of
    // two processes exactly one reads it and the other owns only empty tasks.
    let cfg = east_to_west(&topic, &format!("strait.group.session.timeout.ms = {}\n", SESSION.as_millis()));
    let members: Vec<Strait> = (0..2).map(|_| Strait::start(&cfg)).collect();
    let owned = |m: &Strait| m.metric("strait_tasks_owned", &[("flow", FLOW)]).unwrap_or(0.0);
    let last_is = |m: &Strait, level: &str| last_idle_tasks_line(m).is_some_and(|l| l.contains(level));
    // Each start of a member's flow (each change of its tasks) logs the line again, and a member
    // that stopped may still show the partition until its next start: wait for the end state,
    // one member reading the partition and advised, the other holding only empty tasks and warned.
    let split_and_told = |members: &[Strait]| -> bool {
        if members.iter().any(|m| owned(m) < 1.0) || members.iter().map(owned).sum::<f64>() != 12.0 {
            return false;
        }
        let Some(reader) = members.iter().position(|m| share(m) == 1.0) else { return false };
        let idler = &members[1 - reader];
        share(idler) == 0.0 && last_is(&members[reader], " INFO ") && last_is(idler, " WARN ")
    };
    let told = wait_until(Duration::from_secs(90), || split_and_told(&members));
    assert!(
        told,
        "never one member reading the partition without a warning and the other warned; logs:\n{}",
        logs(&members)
    );
    for m in &members {
        let line = last_idle_tasks_line(m).unwrap_or_default();
        assert!(line.contains("at most 1"), "the line names the fix: {line}");
    }
}

#[test]
fn processes_stopping_together_start_nothing_while_they_stop() {
    let _serial = one_at_a_time();
    let s = stand();
    let topic = unique("stop-together");
    create_topic(&s.east, &topic, PARTITIONS, 1, &[]);
    let mut members: Vec<Strait> = (0..2).map(|_| Strait::start(&config(&topic))).collect();
    assert!(
        wait_until(Duration::from_secs(90), || split(&members)),
        "the members never split the partitions; logs:\n{}",
        logs(&members)
    );
    // Each member that leaves hands its tasks to the other, which is stopping too: those tasks
    // must not start its flow again, or its shutdown waits out the whole timeout (30 s).
    let before: Vec<usize> = members.iter().map(|m| m.log_text().len()).collect();
    let asked = Instant::now();
    for m in &members {
        m.signal("TERM");
    }
    for (i, m) in members.iter_mut().enumerate() {
        let status = m.wait_exit(Duration::from_secs(40));
        let took = asked.elapsed();
        let log = m.log_text();
        assert!(status.is_some_and(|s| s.success()), "member {i} did not exit cleanly ({status:?}); log:\n{log}");
        assert!(took < Duration::from_secs(20), "member {i} took {took:?} to stop; log:\n{log}");
        let after = log.get(before[i]..).unwrap_or_default();
        assert!(
            !after.lines().any(|l| l.contains("state=\"starting\"")),
            "member {i} started a flow while stopping; log after SIGTERM:\n{after}"
        );
    }
}
