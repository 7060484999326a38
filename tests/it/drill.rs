//! `strait drill` on a live pair: strait's canary topic and group cross the flow beside the
//! operator's own load, fail over, and must resume skipping nothing and reading nothing twice;
//! the report names the RPO of every partition of the flow and the RTO. Once on the loopback
//! pair under load, once with the target 200 ms away behind the fault proxy.

use std::time::Duration;

use crate::support::wan::WanCluster;
use crate::support::*;

const PARTITIONS: i32 = 4;

/// Runs `strait drill` with a report file: (exit code, report, table, stderr).
fn drill(config: &std::path::Path, flow: &str, canary: &str) -> (i32, serde_json::Value, String, String) {
    let report = std::env::temp_dir().join("strait-tests").join(format!("{}.json", unique("drill-report")));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_strait"))
        .args(["drill", "--config"])
        .arg(config)
        .args(["--flow", flow, "--canary-topic", canary, "--records", "40", "--report"])
        .arg(&report)
        .output()
        .expect("run strait drill");
    let json = std::fs::read_to_string(&report).ok().and_then(|t| serde_json::from_str(&t).ok());
    let table = std::fs::read_to_string(format!("{}.txt", report.display())).unwrap_or_default();
    (
        out.status.code().unwrap_or(-1),
        json.unwrap_or(serde_json::Value::Null),
        table,
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

/// What every passing drill shows: the canary group resumed exactly on every partition, the
/// drill's window verified clean, an RPO row for each partition of the flow's topics.
fn assert_passed(report: &serde_json::Value, table: &str, out: &str, topics: &[(&str, i32)]) {
    assert_eq!(report["passed"], true, "{out}");
    let canary = report["canary"].as_array().map_or(0, Vec::len);
    assert!(canary > 0, "{report}");
    for c in report["canary"].as_array().into_iter().flatten() {
        let r = &c["resumed"];
        assert_eq!((r["skipped"].as_u64(), r["read_twice"].as_u64()), (Some(0), Some(0)), "{c}");
        assert_eq!(r["read"], r["expected"], "{c}");
        assert_eq!(r["first_is_next"], true, "{c}");
    }
    assert_eq!(report["verification"]["clean"], true, "{report}");
    assert_eq!(report["verification"]["total"]["matched"].as_u64(), Some(canary as u64 * 40), "{report}");
    for (topic, partitions) in topics {
        let rows = report["rpo"].as_array().into_iter().flatten().filter(|r| r["topic"] == *topic).count();
        assert_eq!(rows, *partitions as usize, "an RPO row per partition of {topic}: {report}");
    }
    assert!(table.contains("PASSED") && table.contains("RTO:"), "{table}");
}

#[test]
fn a_drill_under_load_fails_the_canary_group_over_exactly_and_reports_rpo_and_rto() {
    let s = stand();
    let topic = unique("drill-load");
    let canary = unique("strait-drill");
    create_topic(&s.east, &topic, PARTITIONS, 1, &[]);
    let load = SteadyProducer::start(&s.east, &topic, PARTITIONS, 2_000, 500);
    let strait = Strait::start(&east_to_west(&format!("{topic}, {canary}"), "offset.flush.interval.ms = 1000"));
    assert!(wait_until(Duration::from_secs(60), || record_count(&s.west, &format!("us-east.{topic}")) > 2_000));

    for round in 0..2 {
        let (code, report, table, out) = drill(strait.config_path(), "us-east->us-west", &canary);
        assert_eq!(code, 0, "round {round}: {out}\n{}", strait.log_text());
        assert_passed(&report, &table, &out, &[(topic.as_str(), PARTITIONS), (canary.as_str(), 3)]);
        let rto = report["rto_seconds"].as_f64().unwrap_or(-1.0);
        assert!((0.0..60.0).contains(&rto) && rto > 0.0, "round {round}: RTO {rto} s");
        eprintln!("round {round} under load:\n{table}");
    }
    // The operator's own load went on throughout, untouched.
    let sent = load.finish();
    assert!(
        wait_until(Duration::from_secs(90), || record_count(&s.west, &format!("us-east.{topic}")) == sent as i64),
        "the operator's records all crossed"
    );
}

#[test]
fn a_drill_across_a_slow_target_link_passes_and_its_rto_holds_the_round_trip() {
    let s = stand();
    let target = WanCluster::start("drill-wan", 200, 20);
    let canary = unique("strait-drill");
    let config = format!(
        "clusters = us-east, far\nus-east.bootstrap.servers = {}\nfar.bootstrap.servers = {}\nus-east->far.enabled = true\n\
         us-east->far.topics = {canary}\nreplication.factor = 1\nrefresh.topics.interval.seconds = 1\n\
         offset.flush.interval.ms = 1000\ngroups = strait-tests-no-group\n",
        s.east, target.bootstrap
    );
    let strait = Strait::start(&config);
    let (code, report, table, out) = drill(strait.config_path(), "us-east->far", &canary);
    assert_eq!(code, 0, "{out}\n{}", strait.log_text());
    assert_passed(&report, &table, &out, &[(canary.as_str(), 3)]);
    // Committing the positions and the first fetch each cross the link: at least one round trip.
    let rto = report["rto_seconds"].as_f64().unwrap_or(-1.0);
    assert!((0.2..90.0).contains(&rto), "RTO {rto} s across a 200 ms link");
    eprintln!("across a 200 ms link:\n{table}");
}
