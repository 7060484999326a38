//! What `deploy/` hands an operator, checked against the real thing: every metric the Grafana
//! dashboard and the Prometheus alerts name is served by a running strait, and the systemd unit
//! and Kubernetes manifest use the binary's own flags, probe paths and metrics port.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use crate::support::*;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};

const WAIT: Duration = Duration::from_secs(120);
const FLOW: (&str, &str) = ("flow", "us-east->us-west");

fn deploy_file(path: &str) -> String {
    std::fs::read_to_string(repo_root().join("deploy").join(path)).unwrap_or_else(|e| panic!("deploy/{path}: {e}"))
}

/// The names of strait's and the process's series in a PromQL expression (functions, label
/// names and Prometheus' own `up` and `time()` are neither); quoted label values are skipped.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c == '"' {
            quoted = !quoted;
        }
        if !quoted && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            word.push(c);
            continue;
        }
        if word.starts_with("strait_") || word.starts_with("process_") {
            names.push(word.clone());
        }
        word.clear();
    }
    names
}

/// Every `expr` string of a Grafana dashboard, at any depth.
fn dashboard_exprs(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                    _ => dashboard_exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| dashboard_exprs(v, out)),
        _ => {}
    }
}

/// (file, metric) for every metric the dashboard and the alerting rules name.
fn referenced_metrics() -> BTreeSet<(&'static str, String)> {
    let dashboard: serde_json::Value =
        serde_json::from_str(&deploy_file("grafana/strait.json")).expect("deploy/grafana/strait.json is JSON");
    let mut exprs = Vec::new();
    dashboard_exprs(&dashboard, &mut exprs);
    assert!(exprs.len() >= 10, "the dashboard has queries: {exprs:?}");
    let mut names: BTreeSet<(&str, String)> =
        exprs.iter().flat_map(|e| metric_names(e)).map(|m| ("grafana/strait.json", m)).collect();
    let alerts = deploy_file("prometheus/alerts.yml");
    let rules: Vec<&str> = alerts.lines().filter_map(|l| l.trim().strip_prefix("expr:")).collect();
    assert!(rules.len() >= 6, "the alerting rules have expressions");
    names.extend(rules.iter().flat_map(|e| metric_names(e)).map(|m| ("prometheus/alerts.yml", m)));
    names
}

/// The series names of a Prometheus text page.
fn exposed(page: &str) -> BTreeSet<String> {
    page.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

#[test]
fn every_metric_the_dashboard_and_the_alerts_name_is_served() {
    let s = stand();
    let topic = unique("deploy");
    create_topic(&s.east, &topic, 2, 1, &[]);
    let sent: Vec<TestRecord> = (0..200).map(|i| TestRecord::kv(i % 2, &format!("k{i}"), &i.to_string())).collect();
    produce(&s.east, &topic, &sent, &[]);
    // A group that read half of it, so checkpoint rounds write checkpoints.
    let group = unique("deploy-cg");
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &s.east)
        .set("group.id", &group)
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..2 {
        tpl.add_partition_offset(&topic, p, rdkafka::Offset::Offset(50)).expect("offset");
    }
    c.commit(&tpl, CommitMode::Sync).expect("commit");

    let config = format!(
        "clusters = us-east, us-west\nus-east.bootstrap.servers = {}\nus-west.bootstrap.servers = {}\nus-east->us-west.enabled = true\n\
         us-east->us-west.topics = {topic}\nreplication.factor = 1\nrefresh.topics.interval.seconds = 1\nemit.checkpoints.interval.seconds = 1\n\
         emit.heartbeats.interval.seconds = 1\nsync.group.offsets.interval.seconds = 1\ngroups = {group}\n",
        s.east, s.west
    );
    let strait = Strait::start(&config);
    let remote = format!("us-east.{topic}");
    assert!(
        wait_until(WAIT, || record_count(&s.west, &remote) == 200),
        "records never reached the target; log:\n{}",
        strait.log_text()
    );
    let checkpointed = || metric_sum(&strait.metrics(), "strait_checkpoints_written_total") > 0.0;
    assert!(wait_until(WAIT, checkpointed), "no checkpoint written; log:\n{}", strait.log_text());
    for gauge in ["strait_checkpoints_last_round_timestamp_seconds", "strait_heartbeats_last_sent_timestamp_seconds"] {
        let fresh = || strait.metric(gauge, &[FLOW]).is_some_and(|t| t > 1.6e9);
        assert!(wait_until(WAIT, fresh), "{gauge} never set:\n{}", strait.metrics());
    }
    // Everything is delivered: the lag settles at zero in records and seconds.
    let caught_up = || {
        strait.metric("strait_flow_lag_records", &[FLOW]) == Some(0.0)
            && strait.metric("strait_flow_lag_seconds", &[FLOW]) == Some(0.0)
    };
    assert!(wait_until(WAIT, caught_up), "lag never zero:\n{}", strait.metrics());
    let process = || {
        strait.metric("process_resident_memory_bytes", &[]).is_some_and(|b| b > 1e6)
            && strait.metric("process_cpu_seconds_total", &[]).is_some_and(|c| c > 0.0)
    };
    assert!(wait_until(WAIT, process), "no process metrics:\n{}", strait.metrics());

    let page = strait.metrics();
    // The exporter renders the two latency series as histograms (buckets), which the
    // dashboard's histogram_quantile() reads; not as summaries with quantile labels.
    for h in ["strait_replication_record_age_seconds", "strait_replication_latency_seconds"] {
        assert!(page.contains(&format!("# TYPE {h} histogram")), "{h} is not a histogram:\n{page}");
        assert!(
            page.lines().any(|l| l.starts_with(&format!("{h}_bucket{{")) && l.contains("le=\"")),
            "{h} has no buckets:\n{page}"
        );
    }
    let served = exposed(&page);
    let referenced = referenced_metrics();
    assert!(referenced.len() >= 15, "{referenced:?}");
    let missing: Vec<String> = referenced
        .iter()
        .filter(|(_, m)| {
            !served.contains(m) && !["_bucket", "_sum", "_count"].iter().any(|s| served.contains(&format!("{m}{s}")))
        })
        .map(|(file, m)| format!("{m} (deploy/{file})"))
        .collect();
    assert!(missing.is_empty(), "named in deploy/ but not served on /metrics: {missing:?}\npage:\n{page}");
}

/// The `--flags` of a command line.
fn flags<'a>(args: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    args.into_iter().filter(|a| a.starts_with("--")).map(|a| a.split('=').next().unwrap_or(a).to_string()).collect()
}

/// The value of `key:` on the first line after `after` (a line containing it) that has the key.
fn yaml_value_after<'a>(text: &'a str, after: &str, key: &str) -> Option<&'a str> {
    let from = text.find(after)?;
    text[from..].lines().find_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':').map(str::trim))
}

#[test]
fn the_service_manifests_use_the_binarys_flags_probe_paths_and_metrics_port() {
    let out = Command::new(env!("CARGO_BIN_EXE_strait")).args(["run", "--help"]).output().expect("strait run --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout).to_string();
    let known: BTreeSet<String> =
        flags(help.split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']')).into_iter().collect();
    assert!(known.contains("--config") && known.contains("--metrics-listen"), "{help}");

    // Kubernetes: probes on /healthz and /readyz at the port named `metrics`, which is where the
    // ConfigMap's mm2.properties makes strait listen.
    let k8s = deploy_file("kubernetes/strait.yaml");
    assert_eq!(yaml_value_after(&k8s, "livenessProbe:", "path"), Some("/healthz"));
    assert_eq!(yaml_value_after(&k8s, "readinessProbe:", "path"), Some("/readyz"));
    assert_eq!(yaml_value_after(&k8s, "livenessProbe:", "port"), Some("metrics"));
    assert_eq!(yaml_value_after(&k8s, "readinessProbe:", "port"), Some("metrics"));
    let container_port: u16 = yaml_value_after(&k8s, "- name: metrics", "containerPort")
        .and_then(|p| p.parse().ok())
        .expect("a port named metrics");
    let listen = k8s
        .lines()
        .skip_while(|l| !l.trim().starts_with("mm2.properties: |"))
        .find_map(|l| l.trim().strip_prefix("strait.metrics.listen")?.trim().strip_prefix('=').map(str::trim))
        .expect("the ConfigMap's mm2.properties sets strait.metrics.listen");
    let listen: std::net::SocketAddr = listen.parse().expect("address:port");
    assert_eq!(listen.port(), container_port, "the container port is the metrics listener's");
    assert!(listen.ip().is_unspecified(), "{listen}: the kubelet and Prometheus connect from outside the pod");
    let args_line = k8s.lines().find_map(|l| l.trim().strip_prefix("args:")).expect("container args");
    let args: Vec<String> = serde_json::from_str(args_line.trim()).expect("args as a flow sequence of strings");
    assert_eq!(args.first().map(String::as_str), Some("run"));
    let mount = yaml_value_after(&k8s, "volumeMounts:", "mountPath").expect("config mount");
    let config = args.iter().skip_while(|a| *a != "--config").nth(1).expect("--config FILE");
    assert_eq!(config.as_str(), format!("{mount}/mm2.properties"), "the config is the mounted ConfigMap's");

    // systemd: `strait run` with known flags, reloaded with the signal strait reloads on.
    let unit = deploy_file("systemd/strait.service");
    let exec = unit.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("ExecStart");
    let words: Vec<&str> = exec.split_whitespace().collect();
    assert!(words[0].ends_with("/strait") && words[1] == "run", "{exec}");
    assert!(unit.lines().any(|l| l == "ExecReload=/bin/kill -HUP $MAINPID"), "reload is SIGHUP");
    assert!(unit.lines().any(|l| l.starts_with("User=") && l != "User=root"), "a non-root user");

    for flag in flags(args.iter().map(String::as_str)).into_iter().chain(flags(words)) {
        assert!(known.contains(&flag), "{flag} is not a flag of `strait run`:\n{help}");
    }
}
