//! `strait verify` on real clusters: a clean copy verifies clean, while replication runs too;
//! a record deleted from the middle of a target partition, a record injected twice, a record
//! altered by hand and a partition truncated are each found and named by partition and offset;
//! an exactly-once flow across transactions (markers and an aborted one) verifies clean.

use std::time::Duration;

use crate::support::groups::produce_transactions;
use crate::support::*;

const PARTITIONS: i32 = 4;
const PER_PARTITION: i64 = 100;

/// `strait verify` of `us-east->us-west` in JSON: (exit code, report).
fn verify(config: &std::path::Path, extra: &[&str]) -> (i32, serde_json::Value, String) {
    let config = config.to_string_lossy().to_string();
    let mut args = vec!["verify", "--config", config.as_str(), "--flow", "us-east->us-west", "--json"];
    args.extend_from_slice(extra);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_strait")).args(&args).output().expect("run strait verify");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let report = serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), report, stderr)
}

/// Waits until a verification covers `records` source records and is clean; returns the report.
fn verified_clean(config: &std::path::Path, records: u64, within: Duration) -> serde_json::Value {
    let mut last = (0, serde_json::Value::Null, String::new());
    let ok = wait_until(within, || {
        last = verify(config, &[]);
        last.0 == 0 && last.1["total"]["matched"].as_u64() == Some(records)
    });
    assert!(
        ok,
        "no clean verification of {records} records within {within:?}: exit {}, {}\n{}",
        last.0, last.1, last.2
    );
    last.1
}

/// Partition `p` of a report.
fn partition(report: &serde_json::Value, p: i64) -> &serde_json::Value {
    report["partitions"]
        .as_array()
        .and_then(|ps| ps.iter().find(|x| x["partition"].as_i64() == Some(p)))
        .unwrap_or_else(|| panic!("partition {p} is not in the report: {report}"))
}

fn kinds(findings: &serde_json::Value) -> Vec<(&'static str, u64)> {
    ["missing", "duplicates", "out_of_order", "differs", "unexpected"]
        .into_iter()
        .map(|k| (k, findings[k]["records"].as_u64().unwrap_or(u64::MAX)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

#[test]
fn a_clean_copy_verifies_clean_and_each_kind_of_damage_is_found_and_named() {
    let s = stand();
    let topic = unique("verify");
    create_topic(&s.east, &topic, PARTITIONS, 1, &[]);
    // Timestamps of their own, recent: retention would delete records timestamped days ago.
    let t0 =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64) - 60_000;
    let records: Vec<TestRecord> = (0..PARTITIONS)
        .flat_map(|p| {
            (0..PER_PARTITION).map(move |i| TestRecord {
                partition: p,
                key: Some(format!("k{i}").into_bytes()),
                value: Some(format!("{{\"p\":{p},\"i\":{i}}}").into_bytes()),
                headers: vec![("trace".into(), Some(format!("t{p}-{i}").into_bytes())), ("empty".into(), None)],
                timestamp: Some(t0 + i),
            })
        })
        .collect();
    produce(&s.east, &topic, &records, &[]);
    let mut strait = Strait::start(&east_to_west(&topic, "offset.flush.interval.ms = 500"));
    let total = (PARTITIONS as i64 * PER_PARTITION) as u64;
    let clean = verified_clean(strait.config_path(), total, Duration::from_secs(90));
    assert_eq!(clean["clean"], true);
    for p in 0..PARTITIONS as i64 {
        assert_eq!(partition(&clean, p)["source_range"], serde_json::json!([0, PER_PARTITION]), "{clean}");
    }
    strait.stop();

    // Rebuild the remote topic by hand, as a bad repair would: each partition copied back in
    // order with one kind of damage.
    let remote = format!("us-east.{topic}");
    let copy = read_all(&s.west, &remote, total as usize, Duration::from_secs(60));
    assert_eq!(copy.iter().map(Vec::len).sum::<usize>(), total as usize, "the copy to rebuild from");
    delete_topic(&s.west, &remote);
    create_topic(&s.west, &remote, PARTITIONS, 1, &[]);
    let mut rebuilt = Vec::new();
    for (p, records) in copy.into_iter().enumerate() {
        for (i, mut r) in records.into_iter().enumerate() {
            match (p, i) {
                (1, 40..=42) => continue, // deleted from the middle
                (2, 50) => r.value = Some(b"{\"p\":2,\"i\":\"edited\"}".to_vec()),
                (3, 70..) => continue, // truncated
                _ => {}
            }
            rebuilt.push(r);
        }
    }
    // Record 10 of partition 0, written again at the end.
    rebuilt.push(TestRecord {
        partition: 0,
        key: Some(b"k10".to_vec()),
        value: Some(b"{\"p\":0,\"i\":10}".to_vec()),
        headers: vec![("trace".into(), Some(b"t0-10".to_vec())), ("empty".into(), None)],
        timestamp: Some(t0 + 10),
    });
    produce(&s.west, &remote, &rebuilt, &[]);

    let (code, report, stderr) = verify(strait.config_path(), &[]);
    assert_eq!(code, 3, "a damaged copy exits 3: {report}\n{stderr}");
    assert_eq!(report["clean"], false);
    let f = |p| &partition(&report, p)["findings"];
    assert_eq!(kinds(f(0)), vec![("duplicates", 1)], "partition 0: {}", f(0));
    assert_eq!(f(0)["duplicates"]["first_source"], 10);
    assert_eq!(f(0)["duplicates"]["first_target"], PER_PARTITION);
    assert_eq!(kinds(f(1)), vec![("missing", 3)], "partition 1: {}", f(1));
    assert_eq!(f(1)["missing"]["first_source"], 40);
    assert_eq!(f(1)["matched"], PER_PARTITION - 3, "records after the hole are found where they moved");
    assert_eq!(kinds(f(2)), vec![("differs", 1)], "partition 2: {}", f(2));
    assert_eq!(f(2)["differs"]["first_source"], 50);
    assert_eq!(f(2)["differs"]["first_target"], 50);
    assert_eq!(kinds(f(3)), vec![("missing", 30)], "partition 3: {}", f(3));
    assert_eq!(f(3)["missing"]["first_source"], 70);
    assert_eq!(report["duplicates_fail"], false, "an at-least-once flow reports duplicates without failing on them");

    // The table names each partition's first problem; duplicates alone fail only when asked.
    let config = strait.config_path().to_string_lossy().to_string();
    let (ok, table, _) = strait_cli(&["verify", "--config", &config, "--flow", "us-east->us-west"]);
    assert!(!ok);
    eprintln!("{table}");
    for line in [
        "duplicate at source 10 / target 100",
        "missing at source 40",
        "differs at source 50 / target 50",
        "missing at source 70",
        "DIFFERS",
    ] {
        assert!(table.contains(line), "the table says `{line}`:\n{table}");
    }
    // A window before every damage verifies clean (the tail of partition 0 is past it).
    let (code, report, _) = verify(strait.config_path(), &["--topics", &format!("^{topic}$"), "--to-offset", "40"]);
    assert_eq!(code, 0, "offsets 0-39 are intact: {report}");
    assert_eq!(partition(&report, 1)["source_range"], serde_json::json!([0, 40]), "{report}");
    let (_, report, _) = verify(strait.config_path(), &["--fail-on-duplicates"]);
    assert_eq!(report["duplicates_fail"], true, "--fail-on-duplicates");
}

#[test]
fn a_copy_verifies_clean_while_replication_runs_under_load_and_at_a_bounded_rate() {
    let s = stand();
    let topic = unique("verify-live");
    create_topic(&s.east, &topic, PARTITIONS, 1, &[]);
    let load = SteadyProducer::start(&s.east, &topic, PARTITIONS, 2_000, 200);
    let strait = Strait::start(&east_to_west(&topic, "offset.flush.interval.ms = 500"));
    let mut matched = Vec::new();
    for round in 0..3 {
        assert!(wait_until(Duration::from_secs(60), || load.sent() > 4_000 * (round + 1)), "the load runs");
        let (code, report, stderr) = verify(strait.config_path(), &["--max-bytes-per-second", "2000000"]);
        assert_eq!(code, 0, "round {round}: a live copy verifies clean: {report}\n{stderr}");
        let n = report["total"]["matched"].as_u64().unwrap_or(0);
        assert_eq!(report["total"]["expected"].as_u64(), Some(n), "round {round}: {report}");
        // Reading 2 MB/s, the rate holds: bytes over seconds stays under it by a margin a
        // free-running read (tens of MB/s here) would miss.
        let (bytes, secs) = (report["bytes_read"].as_f64().unwrap_or(0.0), report["seconds"].as_f64().unwrap_or(0.0));
        assert!(bytes / secs.max(0.001) < 2_400_000.0, "round {round}: read {bytes} bytes in {secs} s");
        matched.push(n);
    }
    let sent = load.finish();
    assert!(matched.windows(2).all(|w| w[1] > w[0]), "each verification covers more of the live flow: {matched:?}");
    verified_clean(strait.config_path(), sent, Duration::from_secs(90));
}

#[test]
fn an_exactly_once_copy_across_committed_and_aborted_transactions_verifies_clean() {
    let s = stand();
    let topic = unique("verify-eos");
    create_topic(&s.east, &topic, 2, 1, &[]);
    let records: Vec<TestRecord> =
        (0..400).map(|i| TestRecord::kv(i % 2, &format!("k{i}"), &format!("v{i}"))).collect();
    // Markers after every 25 records and one aborted transaction: offsets without records on
    // both sides, which the mapping's runs step over.
    produce_transactions(&s.east, &topic, &records, 25, Some(200));
    let strait =
        Strait::start(&east_to_west(&topic, "exactly.once.source.support = enabled\noffset.flush.interval.ms = 500"));
    let report = verified_clean(strait.config_path(), 400, Duration::from_secs(90));
    assert_eq!(report["exactly_once"], true);
    assert_eq!(report["duplicates_fail"], true, "a duplicate fails an exactly-once flow");
    for p in 0..2 {
        assert!(
            partition(&report, p)["source_range"][1].as_i64().unwrap_or(0) > 200,
            "partition {p} spans the markers: {report}"
        );
    }
}
