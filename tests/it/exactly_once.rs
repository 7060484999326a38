//! Exactly-once (`exactly.once.source.support = enabled`): each task writes its records and the
//! positions they reach in one transaction on the target, so a `read_committed` consumer there
//! sees every source record once, in order, whatever happens to the processes.

use std::time::{Duration, Instant};

use crate::support::*;

const FLOW: &str = "us-east->us-west";
const PARTITIONS: i32 = 6;
/// The group's session timeout in these tests (the broker's minimum).
const SESSION: Duration = Duration::from_secs(6);

fn config(topic: &str) -> String {
    east_to_west(
        topic,
        &format!("exactly.once.source.support = enabled\ntasks.max = {PARTITIONS}\nstrait.group.session.timeout.ms = {}\noffset.flush.interval.ms = 500\n", SESSION.as_millis()),
    )
}

fn share(strait: &Strait) -> f64 {
    partitions_read(strait, FLOW)
}

fn logs(members: &[Strait]) -> String {
    member_logs(members)
}

/// A small deterministic generator, seeded from the clock and printed, so a failing run can be
/// replayed with the same kills.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Records in each target partition must carry strictly increasing sequence numbers: the source
/// wrote them that way (record `s` to partition `s % 6`), so a record out of place or twice
/// breaks the run.
fn out_of_order(parts: &[Vec<TestRecord>]) -> Option<(usize, u64, u64)> {
    for (p, records) in parts.iter().enumerate() {
        let seqs: Vec<u64> = records.iter().filter_map(|r| seq_of(r.value.as_deref())).collect();
        if let Some(w) = seqs.windows(2).find(|w| w[1] <= w[0]) {
            return Some((p, w[0], w[1]));
        }
    }
    None
}

#[test]
fn exactly_once_survives_ten_kill_9s_during_a_two_million_record_backlog_with_nothing_lost_or_doubled() {
    let _serial = one_at_a_time();
    let s = stand();
    let topic = unique("eos-kills");
    create_topic(&s.east, &topic, PARTITIONS, 1, &[]);
    let remote = format!("us-east.{topic}");
    // Large enough that the backlog outlasts the kills: in one CI run strait drained 700,000
    // records between the first and the fifth kill of a 1,000,000 backlog, and six of the ten
    // kills found fewer than 100,000 left.
    const BACKLOG: u64 = 2_000_000;
    preload(&s.east, &topic, PARTITIONS, 0, BACKLOG, 100);

    let cfg = config(&topic);
    let mut members: Vec<Strait> = (0..3).map(|_| Strait::start(&cfg)).collect();
    let producer = SteadyProducer::start_from(&s.east, &topic, PARTITIONS, 5_000, 100, BACKLOG);
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(7, |d| d.as_nanos() as u64);
    println!("kill schedule seed {seed}");
    let mut rng = Lcg(seed);

    // The first kill comes once replication is under way; each victim is restarted at once, and
    // the next kill comes 0.3-1.3 s after the group committed again past what was committed
    // when the last one died: every kill hits members that are committing, with transactions
    // open, while ownership keeps moving.
    assert!(
        wait_until(Duration::from_secs(120), || committed_progress(&s.west, &topic) >= 20_000),
        "replication never got going; logs:\n{}",
        logs(&members)
    );
    let mut backlogs = Vec::new();
    for kill in 1..=10 {
        let victim = rng.below(members.len() as u64) as usize;
        let committed = committed_progress(&s.west, &topic);
        let backlog = producer.sent() as i64 - committed;
        members[victim].kill9();
        members[victim] = Strait::start(&cfg);
        println!("kill {kill}: member {victim}, {backlog} records not yet committed on the target");
        backlogs.push(backlog);
        let resumed = Instant::now();
        assert!(
            wait_until(Duration::from_secs(90), || committed_progress(&s.west, &topic) > committed),
            "kill {kill}: nothing more was committed within 90 s; logs:\n{}",
            logs(&members)
        );
        println!("kill {kill}: committing again after {:?}", resumed.elapsed());
        std::thread::sleep(Duration::from_millis(300 + rng.below(1_000)));
    }
    println!("records not yet committed at each kill: {backlogs:?}");

    let total = producer.finish();
    send_sentinels(&s.east, &topic, PARTITIONS);
    let started = Instant::now();
    let parts = read_through_sentinels(&s.west, &remote, PARTITIONS, Duration::from_secs(420))
        .unwrap_or_else(|| panic!("the sentinels never arrived; logs:\n{}", logs(&members)));
    println!("{total} records produced; the last arrived {:?} after the load stopped", started.elapsed());
    let check = check_seqs(parts.iter().flatten(), total);
    println!("read_committed on the target: {} missing, {} duplicates", check.missing, check.duplicates);
    assert_eq!(check.missing, 0, "lost records, the first {:?}", check.first_missing);
    assert_eq!(check.duplicates, 0, "exactly-once wrote records twice");
    assert_eq!(check.foreign, 0);
    assert_eq!(out_of_order(&parts), None, "a partition's records out of order (partition, before, after)");
    assert!(
        members.iter().map(share).sum::<f64>() == f64::from(PARTITIONS),
        "the members own every partition at the end"
    );
}

#[test]
fn a_new_owner_fences_the_old_one_and_its_open_transaction_never_becomes_visible() {
    let _serial = one_at_a_time();
    let s = stand();
    let topic = unique("eos-fence");
    create_topic(&s.east, &topic, PARTITIONS, 1, &[]);
    let remote = format!("us-east.{topic}");
    // A long transaction keeps the frozen member's last writes open while the group moves on.
    let cfg = format!("{}transaction.boundary.interval.ms = 3000\n", config(&topic));
    let first = Strait::start(&cfg);
    assert!(
        wait_until(Duration::from_secs(60), || share(&first) == f64::from(PARTITIONS)),
        "log:\n{}",
        first.log_text()
    );
    let producer = SteadyProducer::start(&s.east, &topic, PARTITIONS, 5_000, 100);
    assert!(
        wait_until(Duration::from_secs(60), || record_count(&s.west, &remote) >= 20_000),
        "log:\n{}",
        first.log_text()
    );

    // Frozen, the member keeps its producers and open transactions but misses its session: a
    // zombie. The second member takes every task and fences it.
    first.signal("STOP");
    let second = Strait::start(&cfg);
    let moved = wait_until(Duration::from_secs(60), || share(&second) == f64::from(PARTITIONS));
    first.signal("CONT");
    assert!(moved, "the second member never took over; log:\n{}", second.log_text());
    // Woken, the zombie's writes fail and it rejoins as a member with no task or a share.
    assert!(
        wait_until(Duration::from_secs(60), || share(&first) + share(&second) == f64::from(PARTITIONS)),
        "the members never settled; logs:\n{}\n{}",
        first.log_text(),
        second.log_text()
    );

    let total = producer.finish();
    send_sentinels(&s.east, &topic, PARTITIONS);
    let parts = read_through_sentinels(&s.west, &remote, PARTITIONS, Duration::from_secs(180))
        .unwrap_or_else(|| panic!("the sentinels never arrived; logs:\n{}\n{}", first.log_text(), second.log_text()));
    let check = check_seqs(parts.iter().flatten(), total);
    println!(
        "{total} records, read_committed after a frozen owner was fenced: {} missing, {} duplicates",
        check.missing, check.duplicates
    );
    assert_eq!(check.missing, 0, "lost records, the first {:?}", check.first_missing);
    assert_eq!(check.duplicates, 0, "the fenced member's writes became visible");
    assert_eq!(out_of_order(&parts), None);
    let zombie_log = first.log_text();
    let fenced = zombie_log.lines().find(|l| l.to_lowercase().contains("fenced"));
    println!("the frozen member was told: {fenced:?}");
    assert!(fenced.is_some(), "the woken member's writes were not refused as fenced; log:\n{zombie_log}");
}

/// How many records `topic`'s partition 0 holds, counted from the end a `read_uncommitted`
/// reader sees: records of open transactions included.
fn uncommitted_end(bootstrap: &str, topic: &str) -> i64 {
    let reader: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "strait-tests-reader")
        .set("isolation.level", "read_uncommitted")
        .create()
        .expect("consumer");
    rdkafka::consumer::Consumer::fetch_watermarks(&reader, topic, 0, Duration::from_secs(10))
        .map_or(0, |(_, high)| high)
}

#[test]
fn a_parked_exactly_once_flow_aborts_its_open_transaction_so_read_committed_readers_go_on_at_once() {
    let _serial = one_at_a_time();
    let s = stand();
    let topic = unique("eos-park");
    create_topic(&s.east, &topic, 1, 1, &[("max.message.bytes", "3000000")]);
    let remote = format!("us-east.{topic}");
    // Five records the target takes, then one its producer refuses: the flow parks with the
    // five written inside a transaction that cannot commit. The transaction would commit only
    // after 30 s; the target producer's `transaction.timeout.ms` is librdkafka's 60 s.
    let mut sent: Vec<TestRecord> = (0..5).map(|i| TestRecord::kv(0, "small", &i.to_string())).collect();
    sent.push(TestRecord::kv(0, "big", &"b".repeat(2_000_000)));
    produce(&s.east, &topic, &sent, &[("message.max.bytes", "3000000")]);
    let cfg = east_to_west(&topic, "exactly.once.source.support = enabled\ntransaction.boundary.interval.ms = 30000\n");
    let mut strait = Strait::start(&cfg);
    let status = strait.wait_exit(Duration::from_secs(90)).expect("the refused record parks the only flow");
    let log = strait.log_text();
    assert!(!status.success(), "{log}");
    assert!(
        uncommitted_end(&s.west, &remote) >= 5,
        "the five records never reached the target inside a transaction, so nothing was left open to abort; log:\n{log}"
    );

    // Another writer on the same target partition: a `read_committed` reader sees its record
    // only once nothing older is left open, which without the abort takes until the timeout.
    let parked = Instant::now();
    produce(&s.west, &remote, &[TestRecord::kv(0, "sentinel", "another writer")], &[]);
    let got = read_all(&s.west, &remote, 1, Duration::from_secs(15));
    println!("the other writer's record was readable committed {:?} after the park", parked.elapsed());
    let values: Vec<_> = got.iter().flatten().map(|r| r.value.clone()).collect();
    assert_eq!(
        values,
        vec![Some(b"another writer".to_vec())],
        "within 15 s a read_committed reader sees the other writer's record and none of the aborted five; log:\n{log}"
    );
    assert!(log.contains("open transaction was aborted"), "the flow did not say it aborted; log:\n{log}");
}

/// Two exactly-once members of one flow, and a SIGHUP that gives one of them other settings
/// mid-stream: the member with the older settings hands its tasks on and stays out, the other
/// copies everything alone, and a `read_committed` read through a sentinel per partition finds
/// every record once. Before the flow's group was named by its position topic, the reloaded
/// member formed a group of its own and both copied every partition.
#[test]
fn members_that_disagree_on_settings_never_both_copy_and_a_sighup_mid_stream_loses_and_doubles_nothing() {
    let _serial = one_at_a_time();
    let s = stand();
    let topic = unique("eos-disagree");
    create_topic(&s.east, &topic, PARTITIONS, 1, &[]);
    let remote = format!("us-east.{topic}");
    let cfg = config(&topic);
    let members = [Strait::start(&cfg), Strait::start(&cfg)];
    let (a, b) = (&members[0], &members[1]);
    assert!(
        wait_until(Duration::from_secs(90), || share(a) >= 1.0
            && share(b) >= 1.0
            && share(a) + share(b) == f64::from(PARTITIONS)),
        "the members never split the partitions; logs:\n{}",
        logs(&members)
    );
    let producer = SteadyProducer::start(&s.east, &topic, PARTITIONS, 5_000, 100);
    assert!(
        wait_until(Duration::from_secs(60), || record_count(&s.west, &remote) >= 20_000),
        "replication never got under way; logs:\n{}",
        logs(&members)
    );

    // B's deploy gets a new setting first.
    let newer = format!("{cfg}transaction.boundary.interval.ms = 700\n");
    b.rewrite_config(&newer);
    b.signal("HUP");
    let yielded = |m: &Strait| m.metric("strait_group_yielded", &[("flow", FLOW)]) == Some(1.0);
    assert!(
        wait_until(Duration::from_secs(60), || yielded(a) && share(a) == 0.0 && share(b) == f64::from(PARTITIONS)),
        "the member with the older settings never handed every partition to the newer one; logs:\n{}",
        logs(&members)
    );
    assert!(a.metric("strait_group_members_disagreeing", &[("flow", FLOW)]).unwrap_or(0.0) >= 1.0);
    let (ok, out, err) = a.status();
    assert!(ok, "{err}");
    assert!(
        out.contains("group=other: 1x"),
        "status from the older config must show the group runs other settings:\n{out}"
    );
    let (ok, out, err) = b.status();
    assert!(ok, "{err}");
    assert!(out.contains("group=agreed(1)"), "status from the newer config must show it agreed:\n{out}");
    let copied = record_count(&s.west, &remote);
    assert!(
        wait_until(Duration::from_secs(60), || record_count(&s.west, &remote) >= copied + 20_000),
        "the newer member did not go on alone; logs:\n{}",
        logs(&members)
    );

    // A's deploy catches up: the two share the work again.
    a.rewrite_config(&newer);
    a.signal("HUP");
    assert!(
        wait_until(Duration::from_secs(90), || share(a) >= 1.0
            && share(b) >= 1.0
            && share(a) + share(b) == f64::from(PARTITIONS)
            && !yielded(a)),
        "the members never shared the partitions again once they agreed; logs:\n{}",
        logs(&members)
    );

    let total = producer.finish();
    send_sentinels(&s.east, &topic, PARTITIONS);
    let got = read_through_sentinels(&s.west, &remote, PARTITIONS, Duration::from_secs(180))
        .unwrap_or_else(|| panic!("a sentinel never arrived; logs:\n{}", logs(&members)));
    let check = check_seqs(got.iter().flatten(), total);
    println!("{total} produced: {} missing, {} duplicates in a read_committed read", check.missing, check.duplicates);
    assert_eq!(check.missing, 0, "lost records, the first {:?}; logs:\n{}", check.first_missing, logs(&members));
    assert_eq!(check.duplicates, 0, "records copied twice; logs:\n{}", logs(&members));
    assert_eq!(check.foreign, 0);
    assert_eq!(out_of_order(&got), None);
}
