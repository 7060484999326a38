//! Geo-replication over a link with a round trip and faults: one cluster of the flow sits
//! behind a real fault proxy (`scripts/wan.sh`, Toxiproxy), so every connection strait makes to
//! it crosses the link. An at-least-once and an exactly-once flow run through each fault under
//! load; every record arrives (once, in exactly-once, read `read_committed` up to a sentinel per
//! partition), `/readyz` and `strait status` are read while the fault lasts, and the time from
//! the link's return to the last sentinel read is reported.

use std::time::{Duration, Instant};

use crate::support::*;

const PARTITIONS: i32 = 6;
/// Records a second into each flow's topic, 1 KiB each, uncompressed: well under what the link
/// carries.
const RATE: u64 = 400;
const RTT_MS: u32 = 50;
const FAULT: Duration = Duration::from_secs(60);
/// From the link's return to the last sentinel read: a flow that gave up on the target during
/// the fault waits out its restart pause (at most a few seconds after a minute's fault), starts
/// again (its clients' first requests), and drains the minute's backlog.
const RECOVERY: Duration = Duration::from_secs(90);

/// Which cluster of the flow sits across the link: strait runs next to the other one.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Across {
    /// Produce remotely: strait next to the source.
    Target,
    /// Consume remotely: strait next to the target.
    Source,
}

/// One side of a flow: its alias, what strait connects to, what the tests' own clients use.
struct Side {
    alias: String,
    for_strait: String,
    for_tests: String,
}

fn flow_config(source: &Side, target: &Side, topic: &str, groups: &str, extra: &str) -> String {
    let (a, b) = (&source.alias, &target.alias);
    format!(
        "clusters = {a}, {b}\n{a}.bootstrap.servers = {}\n{b}.bootstrap.servers = {}\n{a}->{b}.enabled = true\n\
         {a}->{b}.topics = {topic}\n{a}->{b}.offset.storage.topic = strait-offsets.{topic}.internal\n\
         replication.factor = 1\nrefresh.topics.interval.seconds = 1\nemit.checkpoints.interval.seconds = 1\n\
         groups = {groups}\n{b}.producer.compression.type = none\n{extra}\n",
        source.for_strait, target.for_strait,
    )
}

/// What `/readyz` says of a cluster that has not answered a flow's own clients lately.
const SILENT: &str = "has not answered the flow's";

/// What the probes said while the fault lasted.
#[derive(Default, Debug)]
struct Said {
    /// Whether `/readyz` answered 503 at least once.
    not_ready: bool,
    /// The first `/readyz` body that named the cluster behind the link, if one did.
    readyz: Option<String>,
    /// The first `strait status` line that named it, if one did.
    status: Option<String>,
    /// The most records `strait status` said the flow was behind during the fault.
    max_lag: i64,
    /// And in the 10 s before it.
    lag_before: i64,
}

/// How many records `strait status` says the flow is behind, if it says.
fn status_lag(strait: &Strait) -> Option<i64> {
    lag_in(&strait.status().1)
}

/// The records behind in one `strait status` output.
fn lag_in(out: &str) -> Option<i64> {
    // flow, heartbeat age, replicated heartbeat age, lag records, lag seconds, state...
    out.lines().nth(1).and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
}

/// Runs an at-least-once and an exactly-once flow with the cluster `across` the link through
/// `fault` (held for [`FAULT`]) under load; checks every record arrived; returns what each
/// process's probes said during the fault and the recovery time. With `group`, that group
/// commits on the source before the fault and after it, and the flows' checkpoints must
/// translate its commit after the fault.
fn through(across: Across, fault: &[&str], group: Option<&str>, rate: u64) -> (Vec<Said>, Duration) {
    let s = stand();
    let wan = WanCluster::start(if across == Across::Target { "wan-west" } else { "wan-east" }, RTT_MS, RTT_MS / 10);
    let far = Side { alias: wan.name.clone(), for_strait: wan.bootstrap.clone(), for_tests: wan.internal.clone() };
    let (source, target) = match across {
        Across::Target => {
            (Side { alias: "us-east".into(), for_strait: s.east.clone(), for_tests: s.east.clone() }, far)
        }
        Across::Source => {
            (far, Side { alias: "us-west".into(), for_strait: s.west.clone(), for_tests: s.west.clone() })
        }
    };
    let modes = [("alo", ""), ("eos", "exactly.once.source.support = enabled")];
    let topics: Vec<String> = modes.iter().map(|(m, _)| unique(&format!("wan-{m}"))).collect();
    for t in &topics {
        create_topic(&source.for_tests, t, PARTITIONS, 1, &[]);
    }
    let groups = group.unwrap_or("strait-tests-no-group");
    let straits: Vec<Strait> = modes
        .iter()
        .zip(&topics)
        .map(|((_, extra), t)| Strait::start(&flow_config(&source, &target, t, groups, extra)))
        .collect();
    let producers: Vec<SteadyProducer> =
        topics.iter().map(|t| SteadyProducer::start(&source.for_tests, t, PARTITIONS, rate, 1024)).collect();
    let remote = |t: &String| format!("{}.{t}", source.alias);
    let flowing =
        wait_until(Duration::from_secs(90), || topics.iter().all(|t| record_count(&target.for_tests, &remote(t)) > 0));
    assert!(flowing, "nothing crossed the link before the fault; logs:\n{}", logs(&straits));
    if let Some(g) = group {
        for t in &topics {
            crate::support::groups::consume_as_group(&source.for_tests, t, g, 100);
        }
    }

    let mut said: Vec<Said> = straits.iter().map(|_| Said::default()).collect();
    for _ in 0..5 {
        for (strait, said) in straits.iter().zip(&mut said) {
            said.lag_before = said.lag_before.max(status_lag(strait).unwrap_or(0));
        }
        std::thread::sleep(Duration::from_secs(2));
    }

    wan.fault(fault);
    let faulted = Instant::now();
    let named = |text: &str| text.lines().find(|l| l.contains(&format!("`{}`", wan.name))).map(str::to_string);
    std::thread::scope(|scope| {
        // `/readyz` every half second in a thread of its own: `strait status` below waits on
        // the cluster behind the link, up to its timeout, at every call.
        let mut probes = Vec::new();
        for strait in &straits {
            let named = &named;
            let mut readyz: Option<String> = None;
            let mut not_ready = false;
            probes.push(scope.spawn(move || {
                while faulted.elapsed() < FAULT {
                    let (status, body) = strait.get("/readyz");
                    not_ready |= status == 503;
                    // Keep the first body that says the cluster stopped answering, else the
                    // first that names it.
                    if !readyz.as_deref().is_some_and(|b| b.contains(SILENT)) {
                        readyz = named(&body).or(readyz.take());
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
                (not_ready, readyz)
            }));
        }
        while faulted.elapsed() < FAULT {
            for (strait, said) in straits.iter().zip(&mut said) {
                let (_, out, err) = strait.status();
                said.status = said.status.take().or_else(|| named(&format!("{out}{err}")));
                said.max_lag = said.max_lag.max(lag_in(&out).unwrap_or(0));
            }
            std::thread::sleep(Duration::from_secs(2));
        }
        for (said, probe) in said.iter_mut().zip(probes) {
            (said.not_ready, said.readyz) = probe.join().expect("the /readyz probe panicked");
        }
    });
    wan.heal();
    let healed = Instant::now();

    let sent: Vec<u64> = producers.into_iter().map(SteadyProducer::finish).collect();
    for t in &topics {
        send_sentinels(&source.for_tests, t, PARTITIONS);
    }
    for ((mode, _), (t, sent)) in modes.iter().zip(topics.iter().zip(&sent)) {
        let read =
            read_through_sentinels(&target.for_tests, &remote(t), PARTITIONS, RECOVERY + Duration::from_secs(60));
        let read = read.unwrap_or_else(|| panic!("{mode}: the sentinels never arrived; logs:\n{}", logs(&straits)));
        let check = check_seqs(read.iter().flatten(), *sent);
        assert_eq!(
            check.missing,
            0,
            "{mode}: lost records, first {:?}; logs:\n{}",
            check.first_missing,
            logs(&straits)
        );
        if *mode == "eos" {
            assert_eq!(check.duplicates, 0, "exactly-once wrote records twice");
        }
        eprintln!("{mode}: {sent} records, {} duplicates", check.duplicates);
    }
    let recovered = healed.elapsed();
    eprintln!(
        "fault {fault:?} across the link to the {across:?}: every record arrived {recovered:?} after the link returned"
    );
    assert!(recovered <= RECOVERY, "recovery took {recovered:?}, more than {RECOVERY:?}; logs:\n{}", logs(&straits));
    if let Some(g) = group {
        // A commit after the fault: the checkpoint rounds that the cut interrupted go on and
        // translate it.
        let checkpoints = format!("{}.checkpoints.internal", source.alias);
        for t in &topics {
            crate::support::groups::consume_as_group(&source.for_tests, t, g, 100);
            let committed = crate::support::groups::committed_offsets(&source.for_tests, g, t, PARTITIONS as usize);
            let translated = wait_until(Duration::from_secs(60), || {
                let seen = crate::support::groups::read_checkpoints(&target.for_tests, &checkpoints, g);
                committed.iter().enumerate().filter(|(_, c)| **c > 0).all(|(p, c)| {
                    seen.iter().any(|cp| cp.topic == remote(t) && cp.partition == p as i32 && cp.upstream == *c)
                })
            });
            assert!(translated, "{g}'s commit {committed:?} on {t} was never checkpointed; logs:\n{}", logs(&straits));
        }
    }
    (said, recovered)
}

fn logs(straits: &[Strait]) -> String {
    straits.iter().enumerate().map(|(i, s)| format!("--- process {i}:\n{}", s.log_text())).collect()
}

/// What both probes must say of a cluster that stopped answering: `/readyz` not ready, naming
/// it as the flow's own clients found it silent, and `strait status` naming it.
fn assert_named_unreachable(said: &[Said]) {
    for (i, said) in said.iter().enumerate() {
        eprintln!("process {i}: {said:?}");
        let readyz = said.readyz.as_deref().unwrap_or_default();
        assert!(
            said.not_ready && readyz.contains(SILENT),
            "process {i}: /readyz never said the cluster behind the link stopped answering"
        );
        assert!(said.status.is_some(), "process {i}: `strait status` never named the cluster behind the link");
    }
}

#[test]
fn the_target_link_blackholed_for_a_minute_loses_nothing_and_the_probes_name_it_while_it_lasts() {
    let (said, _) = through(Across::Target, &["blackhole"], None, RATE);
    assert_named_unreachable(&said);
    for (i, said) in said.iter().enumerate() {
        let line = said.status.as_deref().unwrap_or_default();
        assert!(line.contains("did not answer"), "process {i}: `strait status` never said the cluster is unreachable");
    }
}

#[test]
fn connections_to_the_target_reset_every_few_seconds_for_a_minute_lose_nothing() {
    let (said, _) = through(Across::Target, &["reset", "3000"], None, RATE);
    for (i, said) in said.iter().enumerate() {
        eprintln!("process {i}: {said:?}");
    }
}

/// Toxiproxy caps each connection, not the link: the at-least-once flow sends all its records
/// over one producer connection, so 1.5 MB/s into it meets a 1 MB/s cap (the exactly-once
/// flow's six transactional producers each carry a sixth and stay under theirs).
#[test]
fn the_link_collapsed_to_one_megabyte_a_second_for_a_minute_loses_nothing() {
    const FAST: u64 = 1500;
    let (said, _) = through(Across::Target, &["rate", "1024"], None, FAST);
    for (i, said) in said.iter().enumerate() {
        eprintln!("process {i}: {said:?}");
    }
    // The at-least-once flow falls behind while it lasts, and `strait status` says by how much.
    let alo = &said[0];
    assert!(
        alo.max_lag >= alo.lag_before + 10 * FAST as i64,
        "the collapse never showed as lag in `strait status`: {} records behind before it, at most {} during it",
        alo.lag_before,
        alo.max_lag
    );
}

#[test]
fn the_source_link_cut_for_a_minute_while_checkpoint_rounds_run_loses_nothing_and_checkpoints_go_on() {
    let group = unique("wan-cg");
    let (said, _) = through(Across::Source, &["blackhole"], Some(&group), RATE);
    assert_named_unreachable(&said);
}
