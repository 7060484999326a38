//! A flow (`A->B`) is a failure domain: a failed flow parks or restarts alone, the others keep
//! replicating; the process exits only when every flow is parked, or on the first failure with
//! `--fail-fast`; a frozen target slows only the flow into it.

use std::time::{Duration, Instant};

use crate::support::*;

const WAIT: Duration = Duration::from_secs(90);
const EAST_TO_WEST: &str = "us-east->us-west";
const WEST_TO_EAST: &str = "us-west->us-east";

/// `us-east->us-west` on `failing` with the `misbehave` record hook set to error (a permanent
/// failure), `us-west->us-east` on `healthy` without a plugin.
fn one_failing_one_healthy(failing: &str, healthy: &str) -> String {
    east_to_west(
        failing,
        &format!(
            "us-east->us-west.replication.policy.wasm = {}\nus-east->us-west.replication.policy.misbehave.mode = error\n\
             us-west->us-east.enabled = true\nus-west->us-east.topics = {healthy}\n",
            plugin("misbehave").display()
        ),
    )
}

fn batch(tag: &str, n: usize) -> Vec<TestRecord> {
    (0..n).map(|i| TestRecord::kv(0, &format!("{tag}-{i}"), &format!("{tag}-{i}"))).collect()
}

fn values(records: &[TestRecord]) -> Vec<String> {
    records.iter().map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).to_string()).collect()
}

#[test]
fn a_parked_flow_leaves_the_other_flow_replicating() {
    let _serial = one_at_a_time();
    let s = stand();
    let failing = unique("parked-src");
    let healthy = unique("healthy-src");
    create_topic(&s.east, &failing, 1, 1, &[]);
    create_topic(&s.west, &healthy, 1, 1, &[]);
    produce(&s.east, &failing, &batch("doomed", 5), &[]);
    let first = batch("first", 20);
    produce(&s.west, &healthy, &first, &[]);

    let mut strait = Strait::start(&one_failing_one_healthy(&failing, &healthy));
    let parked =
        |st: &Strait| st.metric("strait_flow_state", &[("flow", EAST_TO_WEST), ("state", "parked")]) == Some(1.0);
    assert!(
        wait_until(WAIT, || parked(&strait)),
        "{EAST_TO_WEST} never parked; metrics:\n{}\nlog:\n{}",
        strait.metrics(),
        strait.log_text()
    );

    let remote_healthy = format!("us-west.{healthy}");
    let got = read_all(&s.east, &remote_healthy, 20, WAIT);
    assert_eq!(values(&got[0]), values(&first), "the healthy flow's first batch; log:\n{}", strait.log_text());

    // A batch written after the other flow parked arrives too.
    let second = batch("second", 20);
    produce(&s.west, &healthy, &second, &[]);
    let got = read_all(&s.east, &remote_healthy, 40, WAIT);
    assert_eq!(
        values(&got[0]),
        [values(&first), values(&second)].concat(),
        "the healthy flow after the park; log:\n{}",
        strait.log_text()
    );

    assert!(strait.is_running(), "one parked flow of two must not stop the process; log:\n{}", strait.log_text());
    let page = strait.metrics();
    assert_eq!(metric_value(&page, "strait_flow_up", &[("flow", EAST_TO_WEST)]), Some(0.0), "{page}");
    assert_eq!(metric_value(&page, "strait_flow_up", &[("flow", WEST_TO_EAST)]), Some(1.0), "{page}");
    assert_eq!(
        metric_value(&page, "strait_flow_state", &[("flow", EAST_TO_WEST), ("state", "parked")]),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        metric_value(&page, "strait_flow_state", &[("flow", EAST_TO_WEST), ("state", "running")]),
        Some(0.0),
        "{page}"
    );
    assert_eq!(
        metric_value(&page, "strait_flow_state", &[("flow", WEST_TO_EAST), ("state", "running")]),
        Some(1.0),
        "{page}"
    );
    // Parked before its batch: nothing of it reached the target.
    assert_eq!(record_count(&s.west, &format!("us-east.{failing}")), 0);

    let log = strait.log_text();
    let line = flow_state_line(&log, EAST_TO_WEST, "parked")
        .unwrap_or_else(|| panic!("no `flow state` line parking {EAST_TO_WEST}:\n{log}"));
    assert!(line.contains("reason=") && line.contains("refusing a batch of"), "the park names its reason: {line}");

    let (ok, out, err) = strait.status();
    assert!(ok, "strait status failed:\n{out}\n{err}");
    let row = |flow: &str, state: &str| out.lines().any(|l| l.contains(flow) && l.contains(&format!("state={state}")));
    assert!(row(EAST_TO_WEST, "parked"), "status must show {EAST_TO_WEST} state=parked:\n{out}");
    assert!(row(WEST_TO_EAST, "running"), "status must show {WEST_TO_EAST} state=running:\n{out}");
}

#[test]
fn a_process_whose_every_flow_is_parked_exits_non_zero() {
    let _serial = one_at_a_time();
    let s = stand();
    let topic = unique("all-parked");
    create_topic(&s.east, &topic, 1, 1, &[]);
    produce(&s.east, &topic, &batch("doomed", 5), &[]);
    let extra = format!(
        "replication.policy.wasm = {}\nreplication.policy.misbehave.mode = error\n",
        plugin("misbehave").display()
    );
    let started = Instant::now();
    let mut strait = Strait::start(&east_to_west(&topic, &extra));
    let status = strait
        .wait_exit(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("still running 60 s after its only flow failed; log:\n{}", strait.log_text()));
    let log = strait.log_text();
    println!("exited {status} after {:?}", started.elapsed());
    assert!(!status.success(), "every flow parked must exit non-zero; log:\n{log}");
    assert!(flow_state_line(&log, EAST_TO_WEST, "parked").is_some(), "the flow was parked first:\n{log}");
    assert!(
        log.lines().any(|l| l.contains(EAST_TO_WEST) && l.contains("refusing a batch of")),
        "the log names the flow and the reason:\n{log}"
    );
    assert_eq!(record_count(&s.west, &format!("us-east.{topic}")), 0);
}

#[test]
fn a_client_setting_librdkafka_refuses_parks_the_flow_naming_its_key_and_line() {
    let _serial = one_at_a_time();
    let topic = unique("bad-setting");
    create_topic(&stand().east, &topic, 1, 1, &[]);
    // The fetch consumer is made once the flow runs; the group member (from the target's admin
    // settings) before that, in a thread that otherwise retries a failed join by itself.
    for (key, client) in
        [("us-east.consumer.no.such.setting", "consumer"), ("us-west.admin.no.such.setting", "group member")]
    {
        // Line 11 of the config: `east_to_west` writes ten lines before the extra ones.
        let config = east_to_west(&topic, &format!("{key} = 1\n"));
        assert_eq!(config.lines().position(|l| l.contains("no.such.setting")), Some(10), "{config}");
        let mut strait = Strait::start(&config);
        // A flow that restarted on this would never let the process end.
        let status = strait.wait_exit(Duration::from_secs(60)).unwrap_or_else(|| {
            panic!("still running 60 s after its only flow's {client} setting was refused; log:\n{}", strait.log_text())
        });
        let log = strait.log_text();
        assert!(!status.success(), "{client}: every flow parked must exit non-zero; log:\n{log}");
        assert!(flow_state_line(&log, EAST_TO_WEST, "parked").is_some(), "{client}: the flow was parked:\n{log}");
        assert!(
            log.lines().any(|l| l.contains("`no.such.setting` (line 11)") && l.contains("fix or remove it")),
            "{client}: the log names the key, its line and the fix:\n{log}"
        );
        assert!(
            flow_state_line(&log, EAST_TO_WEST, "restarting").is_none(),
            "{client}: the flow was never restarted:\n{log}"
        );
    }
}

#[test]
fn fail_fast_stops_every_flow_on_the_first_failure() {
    let _serial = one_at_a_time();
    let s = stand();
    let failing = unique("ff-failing");
    let healthy = unique("ff-healthy");
    create_topic(&s.east, &failing, 1, 1, &[]);
    create_topic(&s.west, &healthy, 1, 1, &[]);
    let mut strait = Strait::start_args(&one_failing_one_healthy(&failing, &healthy), &["--fail-fast"]);
    // Both flows run: the healthy one replicates, the other has nothing to fail on yet.
    produce(&s.west, &healthy, &batch("fine", 5), &[]);
    let remote_healthy = format!("us-west.{healthy}");
    assert!(
        wait_until(WAIT, || record_count(&s.east, &remote_healthy) == 5),
        "the healthy flow never ran; log:\n{}",
        strait.log_text()
    );
    assert!(strait.is_running(), "{}", strait.log_text());

    // The first failure ends the process, the running healthy flow with it.
    produce(&s.east, &failing, &batch("doomed", 5), &[]);
    let failed_at = Instant::now();
    let status = strait.wait_exit(Duration::from_secs(30)).unwrap_or_else(|| {
        panic!(
            "--fail-fast: still running 30 s after {EAST_TO_WEST} got a batch to fail on; log:\n{}",
            strait.log_text()
        )
    });
    let log = strait.log_text();
    println!("exited {status} {:?} after the failing batch was produced", failed_at.elapsed());
    assert!(!status.success(), "{log}");
    assert!(
        log.lines().any(|l| l.contains(EAST_TO_WEST) && l.contains("refusing a batch of")),
        "the failure names the flow and the reason:\n{log}"
    );
    assert_eq!(
        record_count(&s.west, &format!("us-east.{failing}")),
        0,
        "nothing of the failed batch reached the target"
    );
}

/// Records a second the source receives, of about `VALUE` bytes each.
const RATE: u64 = 2_000;
const VALUE: usize = 200;

#[test]
fn a_frozen_target_holds_back_only_its_own_flow() {
    let _serial = one_at_a_time();
    let s = stand();
    let frz = OwnCluster::start_to_freeze("flows-frz", 31092);
    let topic = unique("fan-out");
    create_topic(&s.east, &topic, 3, 1, &[]);
    let config = format!(
        "clusters = us-east, us-west, frz\nus-east.bootstrap.servers = {}\nus-west.bootstrap.servers = {}\nfrz.bootstrap.servers = {}\n\
         us-east->us-west.enabled = true\nus-east->frz.enabled = true\ntopics = {topic}\nreplication.factor = 1\n\
         refresh.topics.interval.seconds = 1\ngroups = strait-tests-no-group\n",
        s.east, s.west, frz.bootstrap
    );
    let remote = format!("us-east.{topic}");
    let producer = SteadyProducer::start(&s.east, &topic, 3, RATE, VALUE);
    let strait = Strait::start(&config);

    // Both flows running for 5 s' worth of records and caught up (less than a second behind)
    // before anything is measured.
    let caught_up = |bootstrap: &str| {
        let n = record_count(bootstrap, &remote);
        n >= 5 * RATE as i64 && n + RATE as i64 >= producer.sent() as i64
    };
    assert!(
        wait_until(Duration::from_secs(120), || caught_up(&s.west) && caught_up(&frz.bootstrap)),
        "flows never caught up; log:\n{}",
        strait.log_text()
    );

    let measure = |window: Duration| -> (f64, f64) {
        let (c0, p0, t0) = (record_count(&s.west, &remote), producer.sent(), Instant::now());
        std::thread::sleep(window);
        let (c1, p1, dt) = (record_count(&s.west, &remote), producer.sent(), t0.elapsed().as_secs_f64());
        ((c1 - c0) as f64 / dt, (p1 - p0) as f64 / dt)
    };
    let (healthy_rate, produced_rate) = measure(Duration::from_secs(20));
    println!(
        "both targets up: us-west received {healthy_rate:.0} records/s while the source received {produced_rate:.0}/s"
    );
    assert!(
        healthy_rate >= 0.8 * produced_rate,
        "us-west does not keep up even with both targets up: {healthy_rate:.0}/s of {produced_rate:.0}/s"
    );

    frz.freeze();
    let (frozen_rate, produced_rate) = measure(Duration::from_secs(60));
    frz.thaw();
    println!(
        "frz frozen 60 s: us-west received {frozen_rate:.0} records/s while the source received {produced_rate:.0}/s"
    );
    assert!(
        frozen_rate >= 0.8 * healthy_rate,
        "a frozen frz held back us-east->us-west: {frozen_rate:.0}/s, under 0.8 × {healthy_rate:.0}/s; log:\n{}",
        strait.log_text()
    );

    let total = producer.finish();
    println!("{total} records produced");
    for (name, bootstrap) in [("frz", &frz.bootstrap), ("us-west", &s.west)] {
        let settled = settled_count(bootstrap, &remote, total as i64, Duration::from_secs(180)).unwrap_or_else(|| {
            panic!("{name} holds {} of {total}; log:\n{}", record_count(bootstrap, &remote), strait.log_text())
        });
        let got = read_all(bootstrap, &remote, settled as usize, Duration::from_secs(180));
        let check = check_seqs(got.iter().flatten(), total);
        println!("{name}: {settled} records, {} duplicates, {} missing", check.duplicates, check.missing);
        assert_eq!(
            check.missing,
            0,
            "{name} lost records, first {:?}; log:\n{}",
            check.first_missing,
            strait.log_text()
        );
        assert_eq!(check.foreign, 0, "{name} holds records the source never had");
    }
    drop(strait);
}
