//! What a platform team wires up first: liveness and readiness probes on the metrics listener,
//! and JSON logs.

use std::time::Duration;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(120);

#[test]
fn readyz_names_the_flow_whose_target_is_frozen_while_healthz_stays_alive() {
    let s = stand();
    let frz = OwnCluster::start_to_freeze("probe-frz", 17092);
    let topic = unique("probes");
    create_topic(&s.east, &topic, 1, 1, &[]);
    frz.freeze();
    let config = format!(
        "clusters = us-east, us-west, frz\nus-east.bootstrap.servers = {}\nus-west.bootstrap.servers = {}\nfrz.bootstrap.servers = {}\n\
         us-east->us-west.enabled = true\nus-east->frz.enabled = true\ntopics = {topic}\nreplication.factor = 1\ngroups = strait-tests-no-group\n",
        s.east, s.west, frz.bootstrap
    );
    let strait = Strait::start(&config);
    let west_up = || strait.metric("strait_flow_up", &[("flow", "us-east->us-west")]) == Some(1.0);
    assert!(wait_until(WAIT, west_up), "us-east->us-west never ran; log:\n{}", strait.log_text());

    let (status, body) = strait.get("/readyz");
    assert_eq!(status, 503, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(v["ready"], false, "{body}");
    assert!(v["not_ready"].get("us-east->frz").is_some() && v["not_ready"].get("us-east->us-west").is_none(), "{body}");
    // The process is alive all along: its threads wait for a cluster, none is stuck in a step.
    for _ in 0..5 {
        let (status, body) = strait.get("/healthz");
        assert_eq!(status, 200, "{body}");
        assert!(body.contains(r#""alive":true"#), "{body}");
        std::thread::sleep(Duration::from_secs(1));
    }

    frz.thaw();
    assert!(
        wait_until(WAIT, || strait.get("/readyz").0 == 200),
        "never ready after the thaw: {:?}\nlog:\n{}",
        strait.get("/readyz"),
        strait.log_text()
    );
    let (_, body) = strait.get("/readyz");
    assert!(body.contains(r#""ready":true"#) && body.contains(r#""flows":2"#), "{body}");
    let (status, metrics) = strait.get("/metrics");
    assert!(status == 200 && metrics.contains("strait_flow_up"), "the metrics stay on the same listener");
    assert_eq!(strait.get("/nowhere").0, 404);
}

#[test]
fn json_logs_are_one_object_per_line_with_the_events_fields() {
    let s = stand();
    let topic = unique("json-logs");
    create_topic(&s.east, &topic, 1, 1, &[]);
    let strait = Strait::start_args(&east_to_west(&topic, ""), &["--log-format", "json"]);
    assert!(wait_until(WAIT, || strait.get("/readyz").0 == 200), "log:\n{}", strait.log_text());
    let log = strait.log_text();
    let mut flow_events = 0;
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not one JSON object ({e}): {line}"));
        for key in ["timestamp", "level", "target", "message"] {
            assert!(v.get(key).is_some(), "`{key}` missing: {line}");
        }
        if v["message"] == "flow state" {
            assert_eq!(v["flow"], "us-east->us-west", "{line}");
            assert!(v.get("state").is_some(), "{line}");
            flow_events += 1;
        }
    }
    assert!(flow_events >= 2, "the flow's state changes are logged with their fields:\n{log}");
}
