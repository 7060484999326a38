//! Source partitions come and go: a deleted source topic leaves the assignment and a re-created
//! one starts from its beginning; `auto.offset.reset = latest` starts a partition without a
//! stored position at its end (and stores that at once), `earliest` (the default) at its start.

use std::time::Duration;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(90);
const FLOW: &str = "us-east->us-west";

fn batch(tag: &str, range: std::ops::Range<usize>) -> Vec<TestRecord> {
    range.map(|i| TestRecord::kv(0, &format!("{tag}-{i}"), &format!("{tag}-{i}"))).collect()
}

fn values(records: &[TestRecord]) -> Vec<String> {
    records.iter().map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).to_string()).collect()
}

fn assigned(strait: &Strait) -> Option<f64> {
    strait.metric("strait_source_partitions_assigned", &[("flow", FLOW)])
}

#[test]
fn a_deleted_source_topic_leaves_cleanly_and_is_replicated_from_its_start_when_re_created() {
    let s = stand();
    let topic = unique("deleted");
    let remote = format!("us-east.{topic}");
    create_topic(&s.east, &topic, 1, 1, &[]);
    let old = batch("old", 0..50);
    produce(&s.east, &topic, &old, &[]);
    let mut strait = Strait::start(&east_to_west(&topic, ""));
    assert!(
        wait_until(WAIT, || record_count(&s.west, &remote) == 50),
        "50 of 50 never arrived; log:\n{}",
        strait.log_text()
    );
    assert_eq!(assigned(&strait), Some(1.0), "{}", strait.metrics());

    delete_topic(&s.east, &topic);
    assert!(
        wait_until(Duration::from_secs(60), || assigned(&strait) == Some(0.0)),
        "the deleted topic's partition never left the assignment: {:?}; log:\n{}",
        assigned(&strait),
        strait.log_text()
    );
    assert!(strait.is_running(), "a deleted source topic must not stop strait; log:\n{}", strait.log_text());
    assert_eq!(partition_count(&s.west, &remote), Some(1), "the remote topic stays");
    assert_eq!(record_count(&s.west, &remote), 50, "with its records");

    // Re-created, it is read from its start. More records than the old stored position (50):
    // a strait still holding that position would seek to offset 50 and skip the first 50 new
    // ones (with fewer, the seek would be out of range and librdkafka's reset would hide it).
    create_topic(&s.east, &topic, 1, 1, &[]);
    let new = batch("new", 0..80);
    produce(&s.east, &topic, &new, &[]);
    assert!(
        wait_until(WAIT, || record_count(&s.west, &remote) >= 130),
        "{} of 130 on the remote topic; log:\n{}",
        record_count(&s.west, &remote),
        strait.log_text()
    );
    // A sentinel after them: when it arrives, nothing else came in between.
    let sentinel = batch("sentinel", 0..1);
    produce(&s.east, &topic, &sentinel, &[]);
    let got = read_all(&s.west, &remote, 131, WAIT);
    assert_eq!(
        values(&got[0]),
        [values(&old), values(&new), values(&sentinel)].concat(),
        "log:\n{}",
        strait.log_text()
    );
    assert_eq!(record_count(&s.west, &remote), 131);
    assert_eq!(assigned(&strait), Some(1.0), "the re-created partition is assigned again");
}

/// A single-partition topic with 300 records, and a strait started on it with `extra`, waited
/// for until it assigned the partition and stored a position for it.
fn old_topic_and_strait(prefix: &str, extra: &str) -> (String, Vec<TestRecord>, Strait) {
    let s = stand();
    let topic = unique(prefix);
    create_topic(&s.east, &topic, 1, 1, &[]);
    let old = batch("old", 0..300);
    produce(&s.east, &topic, &old, &[]);
    let strait = Strait::start(&east_to_west(&topic, extra));
    let ready = |st: &Strait| {
        let page = st.metrics();
        metric_value(&page, "strait_source_partitions_assigned", &[("flow", FLOW)]).is_some_and(|n| n >= 1.0)
            && metric_value(&page, "strait_positions_stored_total", &[("flow", FLOW)]).is_some_and(|n| n > 0.0)
    };
    assert!(
        wait_until(WAIT, || ready(&strait)),
        "no partition assigned and position stored; metrics:\n{}\nlog:\n{}",
        strait.metrics(),
        strait.log_text()
    );
    (topic, old, strait)
}

#[test]
fn replicate_from_latest_copies_only_records_produced_after_start() {
    let s = stand();
    let (topic, _old, strait) = old_topic_and_strait("from-latest", "us-east.consumer.auto.offset.reset = latest\n");
    let remote = format!("us-east.{topic}");
    let new = batch("new", 0..30);
    produce(&s.east, &topic, &new, &[]);
    let got = read_all(&s.west, &remote, 30, WAIT);
    assert_eq!(
        values(&got[0]),
        values(&new),
        "the first 30 on the target are the new ones; log:\n{}",
        strait.log_text()
    );
    // A sentinel after them: when it arrives, no old record came after the new ones either.
    let sentinel = batch("sentinel", 0..1);
    produce(&s.east, &topic, &sentinel, &[]);
    let got = read_all(&s.west, &remote, 31, WAIT);
    assert_eq!(values(&got[0]), [values(&new), values(&sentinel)].concat(), "log:\n{}", strait.log_text());
    assert_eq!(record_count(&s.west, &remote), 31);
}

#[test]
fn replicate_from_latest_stores_the_end_at_once_so_a_restart_skips_nothing() {
    let s = stand();
    let (topic, _old, mut first) =
        old_topic_and_strait("latest-restart", "us-east.consumer.auto.offset.reset = latest\n");
    let remote = format!("us-east.{topic}");
    // Killed before it replicated anything: only the position resolved at assignment is stored.
    first.kill9();
    let new = batch("new", 0..30);
    produce(&s.east, &topic, &new, &[]);
    // Resolving `latest` again would start after these 30.
    let second = first.restart();
    let got = read_all(&s.west, &remote, 30, WAIT);
    assert_eq!(values(&got[0]), values(&new), "the restart resumes at the stored end; log:\n{}", second.log_text());
    let sentinel = batch("sentinel", 0..1);
    produce(&s.east, &topic, &sentinel, &[]);
    let got = read_all(&s.west, &remote, 31, WAIT);
    assert_eq!(values(&got[0]), [values(&new), values(&sentinel)].concat(), "log:\n{}", second.log_text());
}

#[test]
fn earliest_is_the_default_and_copies_the_old_records() {
    let s = stand();
    let (topic, old, strait) = old_topic_and_strait("from-earliest", "");
    let remote = format!("us-east.{topic}");
    let new = batch("new", 0..30);
    produce(&s.east, &topic, &new, &[]);
    let got = read_all(&s.west, &remote, 330, WAIT);
    assert_eq!(values(&got[0]), [values(&old), values(&new)].concat(), "log:\n{}", strait.log_text());
    let sentinel = batch("sentinel", 0..1);
    produce(&s.east, &topic, &sentinel, &[]);
    let got = read_all(&s.west, &remote, 331, WAIT);
    assert_eq!(
        values(&got[0]),
        [values(&old), values(&new), values(&sentinel)].concat(),
        "no record twice; log:\n{}",
        strait.log_text()
    );
    assert_eq!(record_count(&s.west, &remote), 331);
}
