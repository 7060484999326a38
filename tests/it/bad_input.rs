//! Bad input gets one clear error, never a hang or a loss.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

fn strait(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_strait")).args(args).output().expect("run strait")
}

fn write_config(text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join("strait-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.properties", unique("cfg")));
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `strait run --fail-fast` on `config` and returns the last line it printed, checking it
/// failed within 40 s.
fn fail_fast_last_line(config: &str) -> String {
    let path = write_config(config);
    let started = Instant::now();
    let port = free_port().to_string();
    let out = strait(&[
        "run",
        "--fail-fast",
        "--config",
        path.to_str().unwrap(),
        "--metrics-listen",
        &format!("127.0.0.1:{port}"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(40), "took {:?}", started.elapsed());
    stderr.lines().last().unwrap_or_default().to_string()
}

#[test]
fn unreachable_bootstrap_servers_fail_within_bounded_time_naming_the_alias() {
    // Nothing listens on port 1 of loopback; the target is real, so the flow joins its group
    // there and fails when it connects to the source.
    let west = stand().west.clone();
    let config = format!("clusters = us-east, us-west\nus-east.bootstrap.servers = 127.0.0.1:1\nus-west.bootstrap.servers = {west}\nus-east->us-west.enabled = true\n");
    let names_the_cluster = |line: &str| {
        line.contains("`us-east`") && line.contains("127.0.0.1:1") && line.contains("us-east.bootstrap.servers")
    };

    // With --fail-fast the process exits at the first failure, the cause on its last line.
    let last = fail_fast_last_line(&config);
    assert!(names_the_cluster(&last), "{last}");

    // Without it an unreachable cluster is a passing cause: the flow is retried with backoff and
    // the process stays up, logging the same line each time.
    let mut waiting = Strait::start(&config);
    let restarts =
        |s: &Strait| s.log_text().lines().filter(|l| names_the_cluster(l) && l.contains("restarting")).count();
    let started = Instant::now();
    let logged = wait_until(Duration::from_secs(40), || restarts(&waiting) >= 1);
    assert!(logged, "no `restarting` line naming the cluster within 40 s; log:\n{}", waiting.log_text());
    let first = started.elapsed();
    assert!(first < Duration::from_secs(40));
    // That it stayed up is shown by a later event, not by waiting for no exit: a second
    // `restarting` line means the flow was started again after the first failure and failed
    // again, so the process lived through it. The retry comes after the 1 s backoff and takes at
    // most the 15 s the source may take to answer plus the 5 s of finding out why; 40 s is
    // twice that.
    let again = wait_until(Duration::from_secs(40), || restarts(&waiting) >= 2);
    assert!(
        again,
        "no second `restarting` line naming the cluster within 40 s of the first; log:\n{}",
        waiting.log_text()
    );
    assert!(waiting.is_running(), "exited on a passing cause; log:\n{}", waiting.log_text());
    println!("`restarting` naming the cluster: the first after {first:?}, the second after {:?}", started.elapsed());
    waiting.kill9();

    // An unreachable target is found when the flow joins its group there.
    let last = fail_fast_last_line("clusters = us-east, nowhere\nus-east.bootstrap.servers = 127.0.0.1:1\nnowhere.bootstrap.servers = 127.0.0.1:2\nus-east->nowhere.enabled = true\n");
    assert!(
        last.contains("`nowhere`") && last.contains("127.0.0.1:2") && last.contains("nowhere.bootstrap.servers"),
        "{last}"
    );
}

#[test]
fn config_errors_name_the_line_and_secrets_never_show() {
    let path =
        write_config("clusters = a, b\na.bootstrap.servers = h:1\nb.bootstrap.servers = h:2\na->c.enabled = true\n");
    let out = strait(&["validate", "--config", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("line 4") && stderr.contains("`c`"), "{stderr}");

    let path = write_config(
        "clusters = a, b\na.bootstrap.servers = h:1\nb.bootstrap.servers = h:2\na->b.enabled = true\na.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required username=\"u\" password=\"hunter2\";\nb.producer.ssl.key.password = hunter3\nrefresh.groups.interval.seconds = 10\n",
    );
    let out = strait(&["validate", "--config", path.to_str().unwrap()]);
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{all}");
    assert!(!all.contains("hunter2") && !all.contains("hunter3"), "a secret leaked:\n{all}");
    assert_eq!(
        all.matches("`refresh.groups.interval.seconds`").count(),
        1,
        "one warning naming a key strait does not act on yet:\n{all}"
    );
}

#[test]
fn strait_log_format_chooses_json_without_the_flag_and_a_bad_value_is_named() {
    let path =
        write_config("clusters = a, b\na.bootstrap.servers = h:1\nb.bootstrap.servers = h:2\na->c.enabled = true\n");
    let validate = |format: &str| {
        Command::new(env!("CARGO_BIN_EXE_strait"))
            .args(["validate", "--config", path.to_str().unwrap()])
            .env("STRAIT_LOG_FORMAT", format)
            .output()
            .expect("run strait")
    };

    let out = validate("json");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    let v: serde_json::Value =
        serde_json::from_str(last).unwrap_or_else(|e| panic!("the error line is not JSON ({e}): {stderr}"));
    assert!(!out.status.success());
    assert_eq!(v["level"], "ERROR", "{last}");
    assert!(v["error"].as_str().is_some_and(|e| e.contains("line 4")), "the error's cause is a field: {last}");

    let out = validate("text");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.lines().last().is_some_and(|l| l.starts_with("error: ") && l.contains("line 4")), "{stderr}");

    let out = validate("xml");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("STRAIT_LOG_FORMAT") && stderr.contains("`xml`") && stderr.contains("json"), "{stderr}");
}

#[test]
fn a_remote_topic_with_fewer_partitions_is_grown_like_mm2_does() {
    let s = stand();
    let topic = unique("grow");
    create_topic(&s.east, &topic, 3, 1, &[]);
    create_topic(&s.west, &format!("us-east.{topic}"), 1, 1, &[]);
    let sent: Vec<TestRecord> = (0..30).map(|i| TestRecord::kv(i % 3, "k", &i.to_string())).collect();
    produce(&s.east, &topic, &sent, &[]);
    let strait = Strait::start(&east_to_west(&topic, ""));
    let remote = format!("us-east.{topic}");
    assert!(
        wait_until(Duration::from_secs(60), || partition_count(&s.west, &remote) == Some(3)),
        "not grown; log:\n{}",
        strait.log_text()
    );
    let mut got = read_all(&s.west, &remote, 30, Duration::from_secs(90));
    strip_timestamps(&mut got);
    assert_eq!(got, by_partition(&sent, 3), "log:\n{}", strait.log_text());
}

#[test]
fn a_record_larger_than_the_target_accepts_stops_the_flow_before_it_naming_topic_partition_offset() {
    let s = stand();
    let topic = unique("too-large");
    create_topic(&s.east, &topic, 1, 1, &[("max.message.bytes", "3000000")]);
    let mut sent: Vec<TestRecord> = (0..5).map(|i| TestRecord::kv(0, "small", &i.to_string())).collect();
    sent.push(TestRecord::kv(0, "big", &"b".repeat(2_000_000)));
    sent.push(TestRecord::kv(0, "small", "after"));
    produce(&s.east, &topic, &sent, &[("message.max.bytes", "3000000")]);

    let config = east_to_west(&topic, "");
    let mut first = Strait::start(&config);
    let status = first.wait_exit(Duration::from_secs(90)).expect("the flow stops by itself");
    let log = first.log_text();
    assert!(!status.success(), "{log}");
    let last = log.lines().last().unwrap_or_default();
    assert!(last.contains(&format!("{topic}-0 offset 5")) && last.contains("message.max.bytes"), "{log}");
    let remote = format!("us-east.{topic}");
    let mut got = read_all(&s.west, &remote, 5, Duration::from_secs(30));
    strip_timestamps(&mut got);
    assert_eq!(got, vec![sent[..5].to_vec()], "the records before it arrived, none after it");

    // The position did not pass the record: a restart stops at the very same offset.
    let mut second = first.restart();
    let status = second.wait_exit(Duration::from_secs(90)).expect("stops again");
    assert!(!status.success());
    assert!(
        second.log_text().lines().last().unwrap_or_default().contains(&format!("{topic}-0 offset 5")),
        "{}",
        second.log_text()
    );
    assert_eq!(record_count(&s.west, &remote), 5);
}
