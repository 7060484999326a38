//! Config reload on SIGHUP: added flows start, removed flows stop with their positions stored,
//! untouched flows keep running without a pause, and an invalid config is refused.

use std::time::{Duration, Instant};

use crate::support::*;
use rdkafka::consumer::Consumer;

const WAIT: Duration = Duration::from_secs(90);
const EAST_TO_WEST: &str = "us-east->us-west";
const WEST_TO_EAST: &str = "us-west->us-east";

/// The lines enabling `us-west->us-east` on `topic`.
fn west_to_east(topic: &str) -> String {
    format!("us-west->us-east.enabled = true\nus-west->us-east.topics = {topic}\n")
}

fn batch(tag: &str, n: usize) -> Vec<TestRecord> {
    (0..n).map(|i| TestRecord::kv(0, &format!("{tag}-{i}"), &format!("{tag}-{i}"))).collect()
}

fn values(records: &[TestRecord]) -> Vec<String> {
    records.iter().map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).to_string()).collect()
}

/// Whether `log` has a `flow state` line about `flow`.
fn state_changed(log: &str, flow: &str) -> bool {
    log.lines().any(|l| {
        l.contains("flow state") && (l.contains(&format!("flow={flow}")) || l.contains(&format!("flow=\"{flow}\"")))
    })
}

/// What `log` got after it was `mark` bytes long.
fn since(log: &str, mark: usize) -> &str {
    let at = (mark.min(log.len())..=log.len()).find(|i| log.is_char_boundary(*i)).unwrap_or(log.len());
    &log[at..]
}

/// Records a second into the running flow's topic.
const RATE: u64 = 500;

#[test]
fn sighup_starts_an_added_flow_without_pausing_the_running_one() {
    let _serial = one_at_a_time();
    let s = stand();
    let running = unique("reload-running");
    let added = unique("reload-added");
    create_topic(&s.east, &running, 1, 1, &[]);
    create_topic(&s.west, &added, 1, 1, &[]);
    let remote_running = format!("us-east.{running}");
    let remote_added = format!("us-west.{added}");
    let strait = Strait::start(&east_to_west(&running, ""));
    let producer = SteadyProducer::start(&s.east, &running, 1, RATE, 100);
    assert!(
        wait_until(WAIT, || {
            let n = record_count(&s.west, &remote_running);
            n >= 2 * RATE as i64 && n + RATE as i64 >= producer.sent() as i64
        }),
        "the running flow never caught up; log:\n{}",
        strait.log_text()
    );
    let before = batch("before", 20);
    produce(&s.west, &added, &before, &[]);

    // Sample the running flow's target every 250 ms, 3 s before the reload and 9 s after it,
    // with one client (a new one per sample takes longer than the interval).
    let watcher = consumer(&s.west);
    let count =
        || watcher.fetch_watermarks(&remote_running, 0, Duration::from_secs(5)).map_or(-1, |(low, high)| high - low);
    let mut samples: Vec<(Duration, i64)> = Vec::new();
    let (started, mut log_mark, mut reloaded_at) = (Instant::now(), 0, None);
    for i in 0..48u32 {
        std::thread::sleep((started + Duration::from_millis(250) * i).saturating_duration_since(Instant::now()));
        samples.push((started.elapsed(), count()));
        if i == 12 {
            log_mark = strait.log_text().len();
            strait.rewrite_config(&east_to_west(&running, &west_to_east(&added)));
            strait.signal("HUP");
            reloaded_at = Some(started.elapsed());
        }
    }

    // The added flow replicates what its topic had and what came after.
    let after = batch("after", 20);
    produce(&s.west, &added, &after, &[]);
    let got = read_all(&s.east, &remote_added, 40, WAIT);
    assert_eq!(
        values(&got[0]),
        [values(&before), values(&after)].concat(),
        "the added flow; log:\n{}",
        strait.log_text()
    );
    assert_eq!(strait.metric("strait_flow_up", &[("flow", WEST_TO_EAST)]), Some(1.0), "{}", strait.metrics());

    // The running flow never stood still around the reload.
    let (mut last_growth, mut last_count, mut longest) = (samples[0].0, samples[0].1, Duration::ZERO);
    for &(at, count) in &samples[1..] {
        if count > last_count {
            (last_growth, last_count) = (at, count);
        }
        longest = longest.max(at - last_growth);
    }
    println!(
        "{} samples, reload at {:?}; the longest stretch without a new record on us-west: {longest:?}",
        samples.len(),
        reloaded_at
    );
    let slowest = samples.windows(2).map(|w| w[1].0 - w[0].0).max().unwrap_or_default();
    assert!(slowest < Duration::from_secs(1), "sampling itself stalled for {slowest:?}: {samples:?}");
    assert!(
        longest < Duration::from_secs(2),
        "the running flow paused {longest:?} around the reload: {samples:?}\nlog:\n{}",
        strait.log_text()
    );
    let log = strait.log_text();
    assert!(
        !state_changed(since(&log, log_mark), EAST_TO_WEST),
        "the untouched flow changed state on the reload:\n{}",
        since(&log, log_mark)
    );

    // And lost nothing.
    let total = producer.finish();
    let settled = settled_count(&s.west, &remote_running, total as i64, WAIT).unwrap_or_else(|| {
        panic!("{} of {total} on us-west; log:\n{}", record_count(&s.west, &remote_running), strait.log_text())
    });
    let check = check_seqs(read_all(&s.west, &remote_running, settled as usize, WAIT).iter().flatten(), total);
    assert_eq!(check.missing, 0, "the running flow lost records around the reload, first {:?}", check.first_missing);
    assert_eq!(check.duplicates, 0, "the running flow replayed records: it was restarted");
}

#[test]
fn a_removed_flow_stops_with_its_positions_stored() {
    let _serial = one_at_a_time();
    let s = stand();
    let kept = unique("reload-kept");
    let removed = unique("reload-removed");
    create_topic(&s.east, &kept, 1, 1, &[]);
    create_topic(&s.west, &removed, 1, 1, &[]);
    let (remote_kept, remote_removed) = (format!("us-east.{kept}"), format!("us-west.{removed}"));
    let both = east_to_west(&kept, &west_to_east(&removed));
    let strait = Strait::start(&both);
    let kept_before = batch("kept-before", 10);
    let removed_before = batch("removed-before", 10);
    produce(&s.east, &kept, &kept_before, &[]);
    produce(&s.west, &removed, &removed_before, &[]);
    assert_eq!(
        values(&read_all(&s.west, &remote_kept, 10, WAIT)[0]),
        values(&kept_before),
        "log:\n{}",
        strait.log_text()
    );
    assert_eq!(
        values(&read_all(&s.east, &remote_removed, 10, WAIT)[0]),
        values(&removed_before),
        "log:\n{}",
        strait.log_text()
    );

    let log_mark = strait.log_text().len();
    strait.rewrite_config(&east_to_west(&kept, ""));
    strait.signal("HUP");
    let removed_down = |st: &Strait| {
        let page = st.metrics();
        metric_value(&page, "strait_flow_up", &[("flow", EAST_TO_WEST)]) == Some(1.0)
            && metric_value(&page, "strait_flow_up", &[("flow", WEST_TO_EAST)]).is_none_or(|up| up == 0.0)
    };
    assert!(
        wait_until(WAIT, || removed_down(&strait)),
        "{WEST_TO_EAST} still up after its removal:\n{}\nlog:\n{}",
        strait.metrics(),
        strait.log_text()
    );
    let log = strait.log_text();
    let stopped = flow_state_line(since(&log, log_mark), WEST_TO_EAST, "stopped");
    assert!(stopped.is_some(), "no `flow state` line stopping {WEST_TO_EAST}:\n{}", since(&log, log_mark));

    // Records for the removed flow, then a sentinel for the kept one: when the sentinel arrived,
    // the removed flow's records had not.
    let removed_after = batch("removed-after", 5);
    produce(&s.west, &removed, &removed_after, &[]);
    let sentinel = batch("kept-sentinel", 1);
    produce(&s.east, &kept, &sentinel, &[]);
    let got = read_all(&s.west, &remote_kept, 11, WAIT);
    assert_eq!(
        values(&got[0]),
        [values(&kept_before), values(&sentinel)].concat(),
        "the kept flow; log:\n{}",
        strait.log_text()
    );
    assert_eq!(record_count(&s.east, &remote_removed), 10, "the removed flow replicated after its removal");
    let log = strait.log_text();
    assert!(
        !state_changed(since(&log, log_mark), EAST_TO_WEST),
        "the kept flow changed state on the reload:\n{}",
        since(&log, log_mark)
    );

    // Added back, it resumes at its stored position: every record once, no gap, no replay.
    strait.rewrite_config(&both);
    strait.signal("HUP");
    let got = read_all(&s.east, &remote_removed, 15, WAIT);
    assert_eq!(
        values(&got[0]),
        [values(&removed_before), values(&removed_after)].concat(),
        "log:\n{}",
        strait.log_text()
    );
    let sentinel = batch("removed-sentinel", 1);
    produce(&s.west, &removed, &sentinel, &[]);
    let got = read_all(&s.east, &remote_removed, 16, WAIT);
    assert_eq!(
        values(&got[0]),
        [values(&removed_before), values(&removed_after), values(&sentinel)].concat(),
        "log:\n{}",
        strait.log_text()
    );
    assert_eq!(record_count(&s.east, &remote_removed), 16);
}

#[test]
fn an_invalid_config_is_refused_and_the_running_flows_are_kept() {
    let _serial = one_at_a_time();
    let s = stand();
    let topic = unique("reload-refused");
    create_topic(&s.east, &topic, 1, 1, &[]);
    let remote = format!("us-east.{topic}");
    let config = east_to_west(&topic, "");
    let mut strait = Strait::start(&config);
    let first = batch("first", 10);
    produce(&s.east, &topic, &first, &[]);
    assert_eq!(values(&read_all(&s.west, &remote, 10, WAIT)[0]), values(&first), "log:\n{}", strait.log_text());

    let log_mark = strait.log_text().len();
    let garbage: String = config.lines().filter(|l| !l.starts_with("clusters")).map(|l| format!("{l}\n")).collect();
    strait.rewrite_config(&garbage);
    strait.signal("HUP");
    assert!(
        wait_until(Duration::from_secs(30), || since(&strait.log_text(), log_mark).contains("config reload refused")),
        "no `config reload refused` line; log:\n{}",
        strait.log_text()
    );
    let log = strait.log_text();
    let refused =
        since(&log, log_mark).lines().find(|l| l.contains("config reload refused")).unwrap_or_default().to_string();
    assert!(refused.contains("clusters"), "the refusal gives the reason (the missing `clusters` line): {refused}");

    let second = batch("second", 10);
    produce(&s.east, &topic, &second, &[]);
    let got = read_all(&s.west, &remote, 20, WAIT);
    assert_eq!(
        values(&got[0]),
        [values(&first), values(&second)].concat(),
        "records after the refusal; log:\n{}",
        strait.log_text()
    );
    assert!(strait.is_running(), "{}", strait.log_text());
    assert_eq!(strait.metric("strait_flow_up", &[("flow", EAST_TO_WEST)]), Some(1.0), "{}", strait.metrics());
    let log = strait.log_text();
    assert!(
        !state_changed(since(&log, log_mark), EAST_TO_WEST),
        "the running flow changed state on the refused reload:\n{}",
        since(&log, log_mark)
    );
}

#[test]
fn a_changed_flow_restarts_with_its_new_settings_and_a_parked_flow_starts_once_its_config_is_fixed() {
    let _serial = one_at_a_time();
    let s = stand();
    let (parked_topic, first_topic, added_topic) =
        (unique("reload-parked"), unique("reload-first"), unique("reload-added"));
    create_topic(&s.east, &parked_topic, 1, 1, &[]);
    create_topic(&s.west, &first_topic, 1, 1, &[]);
    create_topic(&s.west, &added_topic, 1, 1, &[]);
    let failing_hook = format!(
        "us-east->us-west.replication.policy.wasm = {}\nus-east->us-west.replication.policy.misbehave.mode = error\n",
        plugin("misbehave").display()
    );
    let before = east_to_west(&parked_topic, &format!("{failing_hook}{}", west_to_east(&first_topic)));
    let strait = Strait::start(&before);
    let parked_records = batch("parked", 10);
    produce(&s.east, &parked_topic, &parked_records, &[]);
    let first_records = batch("first", 10);
    produce(&s.west, &first_topic, &first_records, &[]);
    let parked =
        |st: &Strait| st.metric("strait_flow_state", &[("flow", EAST_TO_WEST), ("state", "parked")]) == Some(1.0);
    assert!(wait_until(WAIT, || parked(&strait)), "{EAST_TO_WEST} never parked; log:\n{}", strait.log_text());
    let remote_first = format!("us-west.{first_topic}");
    assert_eq!(
        values(&read_all(&s.east, &remote_first, 10, WAIT)[0]),
        values(&first_records),
        "log:\n{}",
        strait.log_text()
    );

    // The fix: no failing hook for the parked flow, and one more topic for the running flow.
    let log_mark = strait.log_text().len();
    strait.rewrite_config(&east_to_west(&parked_topic, &west_to_east(&format!("{first_topic}, {added_topic}"))));
    strait.signal("HUP");
    let remote_parked = format!("us-east.{parked_topic}");
    let got = read_all(&s.west, &remote_parked, 10, WAIT);
    assert_eq!(
        values(&got[0]),
        values(&parked_records),
        "the parked flow started again from where it parked; log:\n{}",
        strait.log_text()
    );
    let restarted = wait_until(WAIT, || {
        let log = strait.log_text();
        let after = since(&log, log_mark);
        flow_state_line(after, WEST_TO_EAST, "stopped").is_some()
            && after
                .lines()
                .filter(|l| l.contains("flow state") && l.contains(WEST_TO_EAST) && l.contains("running"))
                .count()
                > 0
    });
    assert!(restarted, "the changed flow was stopped and started again:\n{}", since(&strait.log_text(), log_mark));

    let added_records = batch("added", 10);
    produce(&s.west, &added_topic, &added_records, &[]);
    let more_first = batch("first-more", 5);
    produce(&s.west, &first_topic, &more_first, &[]);
    let remote_added = format!("us-west.{added_topic}");
    assert_eq!(
        values(&read_all(&s.east, &remote_added, 10, WAIT)[0]),
        values(&added_records),
        "the new setting took effect; log:\n{}",
        strait.log_text()
    );
    // The restart resumed at the stored position: the first topic has every record once.
    let got = read_all(&s.east, &remote_first, 15, WAIT);
    assert_eq!(values(&got[0]), [values(&first_records), values(&more_first)].concat(), "log:\n{}", strait.log_text());
    assert_eq!(record_count(&s.east, &remote_first), 15, "the restart replayed records it had stored as done");
}

#[test]
fn a_reload_giving_a_running_flow_a_refused_group_setting_parks_it_once_stopped_and_the_other_flow_runs_on() {
    let _serial = one_at_a_time();
    let s = stand();
    let (kept_topic, broken_topic) = (unique("reload-kept"), unique("reload-broken"));
    create_topic(&s.east, &kept_topic, 1, 1, &[]);
    create_topic(&s.east, &broken_topic, 1, 1, &[]);
    // `west2` is another alias of us-west: its settings reach only the flow into it.
    const BROKEN: &str = "us-east->west2";
    let config = |extra: &str| {
        let base = east_to_west(&kept_topic, "")
            .replace("clusters = us-east, us-west\n", "clusters = us-east, us-west, west2\n");
        format!(
            "{base}west2.bootstrap.servers = {}\n{BROKEN}.enabled = true\n{BROKEN}.topics = {broken_topic}\n{extra}",
            s.west
        )
    };
    let mut strait = Strait::start(&config(""));
    let (kept_remote, broken_remote) = (format!("us-east.{kept_topic}"), format!("us-east.{broken_topic}"));
    let before = batch("before", 10);
    produce(&s.east, &broken_topic, &before, &[]);
    assert_eq!(values(&read_all(&s.west, &broken_remote, 10, WAIT)[0]), values(&before), "{}", strait.log_text());

    // The group member of the changed flow is made from `west2.admin.*`, and refused.
    strait.rewrite_config(&config("west2.admin.no.such.setting = 1\n"));
    strait.signal("HUP");
    let parked = |st: &Strait| st.metric("strait_flow_state", &[("flow", BROKEN), ("state", "parked")]) == Some(1.0);
    assert!(wait_until(WAIT, || parked(&strait)), "{BROKEN} never parked; log:\n{}", strait.log_text());
    let log = strait.log_text();
    assert!(
        log.lines().any(|l| l.contains("`no.such.setting`") && l.contains("parked until its config changes")),
        "the park names the refused key:\n{log}"
    );
    let kept = batch("kept", 10);
    produce(&s.east, &kept_topic, &kept, &[]);
    assert_eq!(
        values(&read_all(&s.west, &kept_remote, 10, WAIT)[0]),
        values(&kept),
        "the other flow ran on; log:\n{}",
        strait.log_text()
    );
    assert!(strait.is_running(), "{}", strait.log_text());
    assert!(parked(&strait), "{BROKEN} stayed parked once it had stopped; log:\n{}", strait.log_text());

    // Fixed, the flow starts again where it stopped: every record once.
    let after = batch("after", 5);
    produce(&s.east, &broken_topic, &after, &[]);
    strait.rewrite_config(&config(""));
    strait.signal("HUP");
    let got = read_all(&s.west, &broken_remote, 15, WAIT);
    assert_eq!(values(&got[0]), [values(&before), values(&after)].concat(), "log:\n{}", strait.log_text());
    assert_eq!(record_count(&s.west, &broken_remote), 15, "the restart replayed records it had stored as done");
}
