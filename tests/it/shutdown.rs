//! `strait.shutdown.timeout.ms` bounds SIGTERM whatever the clusters do, and what was not
//! acknowledged is replicated again after a restart.

use std::time::{Duration, Instant};

use crate::support::*;

const TIMEOUT_MS: u64 = 10_000;
const MARGIN: Duration = Duration::from_secs(5);
const RECORDS: u64 = 60_000;
const FLOW: &str = "us-east->sd-west";
const PARTITIONS: i32 = 3;
/// Fetched batches that can wait before the producer: one in the fetch stage's hands, one in
/// each of the two middle stages', and `strait.channel.capacity` (2, set below) in each of the
/// three channels.
const BEFORE_THE_PRODUCER: f64 = 1.0 + 2.0 + 3.0 * 2.0;

#[test]
fn sigterm_with_a_frozen_target_returns_within_the_shutdown_timeout_and_a_restart_loses_nothing() {
    // It times SIGTERM and freezes a broker of its own: a thawed broker on a machine loaded by
    // another test's clusters starting took over two minutes to serve its topics again.
    let _serial = one_at_a_time();
    let s = stand();
    // A target of its own: freezing the shared us-west would stall the other tests.
    let target = OwnCluster::start_to_freeze("sd-west", 32092);
    let topic = unique("shutdown");
    create_topic(&s.east, &topic, PARTITIONS, 1, &[]);
    let config = format!(
        "clusters = us-east, sd-west\nus-east.bootstrap.servers = {}\nsd-west.bootstrap.servers = {}\nus-east->sd-west.enabled = true\n\
         us-east->sd-west.topics = {topic}\nreplication.factor = 1\nrefresh.topics.interval.seconds = 1\ngroups = strait-tests-no-group\n\
         strait.shutdown.timeout.ms = {TIMEOUT_MS}\nstrait.channel.capacity = 2\nstrait.batch.max.records = 2000\n",
        s.east, target.bootstrap
    );
    let remote = format!("us-east.{topic}");
    let mut first = Strait::start(&config);
    // Warm-up: the flow runs and its remote topic exists before the target freezes.
    produce(&s.east, &topic, &[TestRecord::kv(0, "warm", "up")], &[]);
    let warm = read_all(&target.bootstrap, &remote, 1, Duration::from_secs(90));
    assert_eq!(warm.iter().map(Vec::len).sum::<usize>(), 1, "warm-up never arrived; log:\n{}", first.log_text());

    let fetches =
        |st: &Strait| st.metric("strait_replication_record_age_seconds_count", &[("flow", FLOW)]).unwrap_or(0.0);
    let fetched_before = fetches(&first);
    target.freeze();
    let records: Vec<TestRecord> = (0..RECORDS)
        .map(|i| TestRecord::kv((i % PARTITIONS as u64) as i32, &i.to_string(), &seq_value(i, 100)))
        .collect();
    produce(&s.east, &topic, &records, &[]);
    // strait fetched them and holds them, in its producer, for a target that does not answer.
    // The count rises once per partition per fetched batch, so a batch adds at most PARTITIONS:
    // past BEFORE_THE_PRODUCER * PARTITIONS, more batches were fetched than can wait before the
    // producer, and the produce stage hands a batch to the producer as soon as it takes it. The
    // target is frozen, so none of those records is acknowledged. All of them fetched make at
    // least 30 batches of at most 2,000 records, so the count gets there.
    let in_the_producer = BEFORE_THE_PRODUCER * PARTITIONS as f64 + 1.0;
    assert!(
        wait_until(Duration::from_secs(60), || fetches(&first) - fetched_before >= in_the_producer),
        "strait fetched {} partition batches of the {RECORDS} records, not the {in_the_producer} that put \
         one in the producer; metrics:\n{}\nlog:\n{}",
        fetches(&first) - fetched_before,
        first.metrics(),
        first.log_text()
    );
    println!(
        "{} partition batches fetched with the target frozen (at least {in_the_producer} puts one in the producer)",
        fetches(&first) - fetched_before
    );

    let asked = Instant::now();
    first.signal("TERM");
    let bound = Duration::from_millis(TIMEOUT_MS) + MARGIN;
    let status = first.wait_exit(bound);
    let took = asked.elapsed();
    target.thaw();
    let status = status.unwrap_or_else(|| {
        panic!("SIGTERM with a frozen target: still running after {bound:?}; log:\n{}", first.log_text())
    });
    println!("SIGTERM with the target frozen: exited {status} after {took:?} (timeout {TIMEOUT_MS} ms)");

    // The restart replicates everything the target had not acknowledged: nothing lost.
    let second = first.restart();
    let settled = settled_count(&target.bootstrap, &remote, RECORDS as i64 + 1, Duration::from_secs(180))
        .unwrap_or_else(|| {
            panic!(
                "after the restart the target holds {} of {}; log:\n{}\nlog before the restart:\n{}",
                record_count(&target.bootstrap, &remote),
                RECORDS + 1,
                second.log_text(),
                first.log_text()
            )
        });
    let got = read_all(&target.bootstrap, &remote, settled as usize, Duration::from_secs(120));
    let check = check_seqs(got.iter().flatten().filter(|r| r.value.as_deref() != Some(&b"up"[..])), RECORDS);
    println!(
        "{settled} records on the target for {} produced: {} duplicates",
        RECORDS + 1,
        settled - (RECORDS as i64 + 1)
    );
    assert_eq!(
        check.missing,
        0,
        "lost records, the first {:?}; restart log:\n{}",
        check.first_missing,
        second.log_text()
    );
    assert_eq!(check.foreign, 0);
    assert!(got.iter().flatten().any(|r| r.value.as_deref() == Some(&b"up"[..])), "the warm-up record is there");
    drop(second);
}
