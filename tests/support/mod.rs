//! Shared by the integration tests: real clusters started by `scripts/kafka.sh`, a `strait`
//! process per test, and small producer / reader helpers. Nothing here is a fake: a test that
//! cannot start Kafka panics with the script's output.

#![allow(dead_code)] // each test binary uses a different part

pub mod groups;
pub mod load;

#[allow(unused_imports)] // each test binary uses a different part, as with dead_code above
pub use load::*;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use strait_core::cluster::{ClusterAdmin, TopicSpec};
use strait_core::config::{ClientSettings, ClusterAlias, ClusterConfig};

/// The seed articles' stand: `us-east` with 3 brokers, `us-west` with 1.
pub struct Stand {
    pub east: String,
    pub west: String,
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `scripts/kafka.sh` and returns its last stdout line; panics with its output on failure.
pub fn kafka_sh(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/kafka.sh"))
        .args(args)
        .output()
        .expect("bash must be on PATH to run scripts/kafka.sh");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "scripts/kafka.sh {args:?} failed ({}): this test needs real Kafka.\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.lines().last().unwrap_or_default().trim().to_string()
}

/// Runs `scripts/kafka.sh` from the repository root and returns its whole stdout.
pub fn kafka_sh_stdout(args: &[&str]) -> String {
    let out = Command::new("bash").current_dir(repo_root()).arg("scripts/kafka.sh").args(args).output().expect("bash");
    assert!(out.status.success(), "scripts/kafka.sh {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Starts (or finds running) the shared stand. Tests use unique topic names, so they can share it.
pub fn stand() -> &'static Stand {
    static STAND: OnceLock<Stand> = OnceLock::new();
    STAND.get_or_init(|| Stand {
        east: kafka_sh(&["start", "us-east", "3", "19092"]),
        west: kafka_sh(&["start", "us-west", "1", "29092"]),
    })
}

/// A topic name no other test (or earlier run) uses.
pub fn unique(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{prefix}-{}-{nanos:x}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

fn cluster(alias: &str, bootstrap: &str) -> ClusterConfig {
    ClusterConfig { alias: ClusterAlias::new(alias), bootstrap_servers: bootstrap.to_string(), line: 0 }
}

/// Creates a topic through strait's own admin wrapper.
pub fn create_topic(bootstrap: &str, name: &str, partitions: i32, rf: i32, configs: &[(&str, &str)]) {
    let admin = ClusterAdmin::connect(&cluster("test", bootstrap), &ClientSettings::default()).expect("admin client");
    let spec = TopicSpec {
        name: name.to_string(),
        partitions,
        replication_factor: rf,
        configs: configs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    };
    admin.ensure_topic(&spec, None).unwrap_or_else(|e| panic!("create {name}: {e}"));
    assert!(
        wait_until(Duration::from_secs(30), || partition_count(bootstrap, name) == Some(partitions as usize)),
        "{name} does not show {partitions} partitions 30 s after its creation"
    );
}

/// Every config entry `topic` has on `bootstrap`, whatever set it (topic, broker, default).
pub fn topic_config_entries(bootstrap: &str, topic: &str) -> Vec<rdkafka::admin::ConfigEntry> {
    let admin = ClusterAdmin::connect(&cluster("test", bootstrap), &ClientSettings::default()).expect("admin client");
    let mut all = admin.topic_configs(&[topic]).unwrap_or_else(|e| panic!("describe {topic}: {e}"));
    all.remove(topic).and_then(Result::ok).unwrap_or_default()
}

/// The configs set on `topic` itself (not inherited from the broker or Kafka's defaults).
pub fn topic_level_configs(bootstrap: &str, topic: &str) -> std::collections::HashMap<String, String> {
    topic_config_entries(bootstrap, topic)
        .into_iter()
        .filter(|e| e.source == rdkafka::admin::ConfigSource::DynamicTopic)
        .filter_map(|e| Some((e.name, e.value?)))
        .collect()
}

/// Grows a topic to `partitions`.
pub fn grow_topic(bootstrap: &str, name: &str, partitions: i32) {
    let admin = ClusterAdmin::connect(&cluster("test", bootstrap), &ClientSettings::default()).expect("admin client");
    let have = partition_count(bootstrap, name).map(|n| n as i32);
    let spec = TopicSpec { name: name.to_string(), partitions, replication_factor: -1, configs: vec![] };
    admin.ensure_topic(&spec, have).unwrap_or_else(|e| panic!("grow {name}: {e}"));
}

pub fn partition_count(bootstrap: &str, topic: &str) -> Option<usize> {
    let consumer = consumer(bootstrap);
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).ok()?;
    let t = md.topics().first()?;
    (t.error().is_none() && !t.partitions().is_empty()).then(|| t.partitions().len())
}

pub fn topic_names(bootstrap: &str) -> Vec<String> {
    let md = consumer(bootstrap).fetch_metadata(None, Duration::from_secs(10)).expect("metadata");
    md.topics().iter().map(|t| t.name().to_string()).collect()
}

pub fn consumer(bootstrap: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        // librdkafka wants a group id even for assign(); it is never joined or committed.
        .set("group.id", "strait-tests-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer")
}

/// A record as a test sends and later compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRecord {
    pub partition: i32,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp: Option<i64>,
}

impl TestRecord {
    pub fn kv(partition: i32, key: &str, value: &str) -> Self {
        Self {
            partition,
            key: Some(key.as_bytes().to_vec()),
            value: Some(value.as_bytes().to_vec()),
            headers: vec![],
            timestamp: None,
        }
    }
}

pub fn producer(bootstrap: &str, extra: &[(&str, &str)]) -> ThreadedProducer<DefaultProducerContext> {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap).set("acks", "all").set("enable.idempotence", "true").set("linger.ms", "5");
    for (k, v) in extra {
        cfg.set(*k, *v);
    }
    cfg.create().expect("producer")
}

/// Sends `records` with acks=all and waits until every one is acknowledged.
pub fn produce(bootstrap: &str, topic: &str, records: &[TestRecord], extra: &[(&str, &str)]) {
    let p = producer(bootstrap, extra);
    send_all(&p, topic, records);
    p.flush(Duration::from_secs(60)).expect("source acknowledged every record");
}

pub fn send_all(p: &ThreadedProducer<DefaultProducerContext>, topic: &str, records: &[TestRecord]) {
    for r in records {
        let mut br = BaseRecord::to(topic).partition(r.partition);
        if let Some(k) = &r.key {
            br = br.key(&k[..]);
        }
        if let Some(v) = &r.value {
            br = br.payload(&v[..]);
        }
        if let Some(ts) = r.timestamp {
            br = br.timestamp(ts);
        }
        if !r.headers.is_empty() {
            let mut hs = OwnedHeaders::new();
            for (k, v) in &r.headers {
                hs = hs.insert(rdkafka::message::Header { key: k, value: v.as_deref() });
            }
            br = br.headers(hs);
        }
        let mut pending = br;
        loop {
            match p.send(pending) {
                Ok(()) => break,
                Err((
                    rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                    back,
                )) => {
                    pending = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => panic!("produce to {topic}: {e}"),
            }
        }
    }
}

/// Sum of (high watermark - low watermark) over the topic's partitions.
pub fn record_count(bootstrap: &str, topic: &str) -> i64 {
    let Some(n) = partition_count(bootstrap, topic) else { return 0 };
    let c = consumer(bootstrap);
    (0..n as i32).map(|p| c.fetch_watermarks(topic, p, Duration::from_secs(10)).map_or(0, |(lo, hi)| hi - lo)).sum()
}

/// Reads every partition of `topic` from the beginning until `expected` records in total
/// arrived (or `timeout` passed), and returns them per partition in log order.
pub fn read_all(bootstrap: &str, topic: &str, expected: usize, timeout: Duration) -> Vec<Vec<TestRecord>> {
    let deadline = Instant::now() + timeout;
    let mut n = None;
    wait_until(timeout, || {
        n = partition_count(bootstrap, topic);
        n.is_some()
    });
    let n = n.unwrap_or_else(|| panic!("{topic} never appeared"));
    let c = consumer(bootstrap);
    let mut tpl = TopicPartitionList::new();
    for p in 0..n as i32 {
        tpl.add_partition_offset(topic, p, Offset::Beginning).expect("tpl");
    }
    c.assign(&tpl).expect("assign");
    let mut out = vec![Vec::new(); n];
    let mut total = 0;
    while total < expected && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            let headers = m
                .headers()
                .map(|hs| hs.iter().map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec))).collect())
                .unwrap_or_default();
            out[m.partition() as usize].push(TestRecord {
                partition: m.partition(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().map(<[u8]>::to_vec),
                headers,
                timestamp: m.timestamp().to_millis(),
            });
            total += 1;
        }
    }
    out
}

pub fn wait_until(timeout: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// A free loopback port for a strait metrics endpoint.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// An mm2.properties for `us-east->us-west` replicating `topics`, plus `extra` lines.
pub fn east_to_west(topics: &str, extra: &str) -> String {
    let s = stand();
    format!(
        "clusters = us-east, us-west\nus-east.bootstrap.servers = {}\nus-west.bootstrap.servers = {}\nus-east->us-west.enabled = true\nus-east->us-west.topics = {topics}\nreplication.factor = 1\nrefresh.topics.interval.seconds = 1\nemit.checkpoints.interval.seconds = 1\nsync.group.offsets.interval.seconds = 1\ngroups = strait-tests-no-group\n{extra}\n",
        s.east, s.west
    )
}

/// The position topic of this test's flows from `source`: one per test (named after the test's
/// thread), because a flow's group is named by its position topic, and tests running side by
/// side on the same two clusters must be separate replicators, as they were when each config's
/// settings named its own group.
pub fn test_positions_topic(source: &str) -> String {
    let thread = std::thread::current();
    let test: String = thread
        .name()
        .unwrap_or("main")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '.' })
        .collect();
    format!("strait-offsets.{source}.{test}.internal")
}

/// `config` with each possible flow's `offset.storage.topic` set to this test's
/// ([`test_positions_topic`]), unless the config sets one itself.
pub fn with_test_positions(config: &str) -> String {
    if config.contains("offset.storage.topic") {
        return config.to_string();
    }
    let aliases: Vec<String> = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("clusters").and_then(|r| r.trim_start().strip_prefix('=')))
        .map(|list| list.split(',').map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect())
        .unwrap_or_default();
    let mut out = config.to_string();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    for source in &aliases {
        for target in aliases.iter().filter(|t| *t != source) {
            out.push_str(&format!("{source}->{target}.offset.storage.topic = {}\n", test_positions_topic(source)));
        }
    }
    out
}

/// A running `strait run` process; killed when dropped.
pub struct Strait {
    pub child: Child,
    pub metrics_port: u16,
    pub log: PathBuf,
    config: PathBuf,
}

impl Strait {
    pub fn start(config: &str) -> Self {
        let dir = std::env::temp_dir().join("strait-tests");
        std::fs::create_dir_all(&dir).expect("temp dir");
        let id = unique("strait");
        let path = dir.join(format!("{id}.properties"));
        std::fs::write(&path, with_test_positions(config)).expect("write config");
        Self::start_with(path, dir.join(format!("{id}.log")))
    }

    /// Starts another process on the same config file (a restart), logging to a new file.
    pub fn restart(&self) -> Self {
        Self::start_with(self.config.clone(), self.log.with_extension("restart.log"))
    }

    fn start_with(config: PathBuf, log: PathBuf) -> Self {
        let metrics_port = free_port();
        let log_file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_strait"))
            .args(["run", "--config"])
            .arg(&config)
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics_port}")])
            // `STRAIT_TEST_LOG=info,strait_core=debug` to see more when a test fails.
            .env("STRAIT_LOG", std::env::var("STRAIT_TEST_LOG").unwrap_or_else(|_| "info".into()))
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("spawn strait");
        Self { child, metrics_port, log, config }
    }

    /// The config file this process runs.
    pub fn config_path(&self) -> &std::path::Path {
        &self.config
    }

    /// Stops the process with SIGTERM (it stores positions) and waits for it.
    pub fn stop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        if self.wait_exit(Duration::from_secs(60)).is_none() {
            self.kill9();
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill(); // SIGKILL
        let _ = self.child.wait();
    }

    /// Waits for the process to exit by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        status.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()
    }

    /// The Prometheus page.
    pub fn metrics(&self) -> String {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.metrics_port)) else { return String::new() };
        let _ = s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n");
        let mut body = String::new();
        let _ = s.read_to_string(&mut body);
        body
    }
}

impl Drop for Strait {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a `strait` command to completion: (success, stdout, stderr).
pub fn strait_cli(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_strait")).args(args).output().expect("run strait");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Records per partition, for comparisons that ignore the (target-assigned) timestamps' absence.
pub fn by_partition(records: &[TestRecord], partitions: usize) -> Vec<Vec<TestRecord>> {
    let mut out = vec![Vec::new(); partitions];
    for r in records {
        out[r.partition as usize].push(r.clone());
    }
    out
}

pub fn strip_timestamps(parts: &mut [Vec<TestRecord>]) {
    for p in parts.iter_mut() {
        for r in p.iter_mut() {
            r.timestamp = None;
        }
    }
}

pub type Counts = HashMap<String, i64>;

/// Builds the policy components in `plugins/` (once per test binary) and returns the path of
/// `strait_policy_<name>.wasm`.
pub fn plugin(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = Command::new(env!("CARGO"))
            .args(["build", "--release", "--target", "wasm32-wasip2", "--manifest-path"])
            .arg(repo_root().join("plugins/Cargo.toml"))
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .expect("cargo");
        assert!(out.status.success(), "building plugins/ failed:\n{}", String::from_utf8_lossy(&out.stderr));
    });
    let path =
        repo_root().join(format!("plugins/target/wasm32-wasip2/release/strait_policy_{}.wasm", name.replace('-', "_")));
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// The newest heartbeat of `source->target` in `topic` on `bootstrap`.
pub fn newest_heartbeat(
    bootstrap: &str,
    topic: &str,
    source: &str,
    target: &str,
) -> Option<strait_core::offsets::mm2::Heartbeat> {
    let c = consumer(bootstrap);
    let (_, high) = c.fetch_watermarks(topic, 0, Duration::from_secs(10)).ok()?;
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Offset((high - 500).max(0))).ok()?;
    c.assign(&tpl).ok()?;
    let mut newest = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        let Some(Ok(m)) = c.poll(Duration::from_millis(200)) else { continue };
        let beat =
            strait_core::offsets::mm2::Heartbeat::decode(m.key().unwrap_or_default(), m.payload().unwrap_or_default())
                .expect("MM2 layout");
        if beat.source == source && beat.target == target {
            newest = Some(beat);
        }
        if m.offset() >= high - 1 {
            break;
        }
    }
    newest
}

/// The sum of every series of the counter `name` in a Prometheus text page.
pub fn metric_sum(page: &str, name: &str) -> f64 {
    page.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' ')))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `examples/<name>/mm2.properties` with `orders` renamed to `topic`, plugins at their built
/// paths, and quick intervals for a test.
pub fn example(name: &str, topic: &str) -> String {
    let path = repo_root().join(format!("examples/{name}/mm2.properties"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut text = text.replace("orders", topic);
    for plugin_name in ["last-write-wins", "key-ownership"] {
        let built =
            format!("plugins/target/wasm32-wasip2/release/strait_policy_{}.wasm", plugin_name.replace('-', "_"));
        if text.contains(&built) {
            text = text.replace(&built, &plugin(plugin_name).display().to_string());
        }
    }
    format!("{text}\nrefresh.topics.interval.seconds = 1\nreplication.factor = 1\n")
}

// ---------------------------------------------------------------------------------------------
// Flow lifecycle, shutdown, assignment and reload tests (tests/flows.rs, shutdown.rs,
// assignment.rs, reload.rs).

impl Strait {
    /// Starts `strait run` on `config` with `extra` arguments after the usual ones, e.g.
    /// `--fail-fast`.
    pub fn start_args(config: &str, extra: &[&str]) -> Self {
        let dir = std::env::temp_dir().join("strait-tests");
        std::fs::create_dir_all(&dir).expect("temp dir");
        let id = unique("strait");
        let path = dir.join(format!("{id}.properties"));
        std::fs::write(&path, with_test_positions(config)).expect("write config");
        let metrics_port = free_port();
        let log = dir.join(format!("{id}.log"));
        let log_file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_strait"))
            .args(["run", "--config"])
            .arg(&path)
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics_port}")])
            .args(extra)
            .env("STRAIT_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("spawn strait");
        Self { child, metrics_port, log, config: path }
    }

    /// Sends `kill -<sig>` (e.g. `HUP`, `TERM`) to the process.
    pub fn signal(&self, sig: &str) {
        let status =
            Command::new("kill").arg(format!("-{sig}")).arg(self.child.id().to_string()).status().expect("kill");
        assert!(status.success(), "kill -{sig} {}", self.child.id());
    }

    /// The sum of the series of `name` whose labels include `labels`, or None if there is none.
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        metric_value(&self.metrics(), name, labels)
    }

    /// Replaces the config file the way an operator's deploy does: a new file renamed over it.
    pub fn rewrite_config(&self, text: &str) {
        let staged = self.config.with_extension("staged");
        std::fs::write(&staged, with_test_positions(text)).expect("write the new config");
        std::fs::rename(&staged, &self.config).expect("rename the new config over the old one");
    }

    /// The `strait status` of this process's config, reading its metrics endpoint: (success, stdout, stderr).
    pub fn status(&self) -> (bool, String, String) {
        let config = self.config.to_str().expect("utf-8 path").to_string();
        strait_cli(&["status", "--config", &config, "--metrics", &format!("127.0.0.1:{}", self.metrics_port)])
    }

    /// Whether the process has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// The sum of the series of `name` in a Prometheus text page whose labels include every one of
/// `labels` (other labels may be present), or None if no series matches.
pub fn metric_value(page: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in page.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else { continue };
        let (series_labels, value) = if let Some(inner) = rest.strip_prefix('{') {
            let Some(end) = inner.rfind('}') else { continue };
            (parse_labels(&inner[..end]), &inner[end + 1..])
        } else if rest.starts_with(' ') {
            (Vec::new(), rest)
        } else {
            continue;
        };
        if !labels.iter().all(|(k, v)| series_labels.iter().any(|(sk, sv)| sk == k && sv == v)) {
            continue;
        }
        if let Some(v) = value.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()) {
            found = Some(found.unwrap_or(0.0) + v);
        }
    }
    found
}

/// `a="x",b="y"` as pairs, with Prometheus's escapes (`\"`, `\\`, `\n`) undone.
fn parse_labels(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() || chars.next() != Some('"') {
            return out;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => break,
                },
                '"' => break,
                c => value.push(c),
            }
        }
        out.push((key.trim().to_string(), value));
    }
}

/// The `flow state` log line saying `flow` went to `state`, if there is one.
pub fn flow_state_line(log: &str, flow: &str, state: &str) -> Option<String> {
    log.lines()
        .filter(|l| l.contains("flow state"))
        .filter(|l| l.contains(&format!("flow={flow}")) || l.contains(&format!("flow=\"{flow}\"")))
        .find(|l| l.contains(&format!("state={state}")) || l.contains(&format!("state=\"{state}\"")))
        .map(str::to_string)
}

/// Waits for a future on this thread (rdkafka's admin futures complete from its own thread).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

/// Deletes `name` and waits until the cluster's metadata no longer lists it.
pub fn delete_topic(bootstrap: &str, name: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", bootstrap).create().expect("admin client");
    let opts = AdminOptions::new()
        .operation_timeout(Some(Duration::from_secs(30)))
        .request_timeout(Some(Duration::from_secs(30)));
    let results = block_on(admin.delete_topics(&[name], &opts)).unwrap_or_else(|e| panic!("delete {name}: {e}"));
    for r in results {
        if let Err((topic, code)) = r {
            panic!("delete {topic}: {code}");
        }
    }
    assert!(
        wait_until(Duration::from_secs(60), || (0..3).all(|_| !topic_names(bootstrap).contains(&name.to_string()))),
        "{name} is still listed 60 s after its deletion"
    );
}

/// A cluster of a test's own (`scripts/kafka.sh start --fresh NAME 1 PORT`), stopped when
/// dropped, woken first if the test left it frozen.
pub struct OwnCluster {
    pub name: String,
    pub bootstrap: String,
}

impl OwnCluster {
    /// A cluster with KRaft's StandardAuthorizer (`kafka.sh start --authorizer`): ACLs can be
    /// created, described and are enforced; the tests' ANONYMOUS clients are super users.
    pub fn start_with_authorizer(name: &str, port: u16) -> Self {
        let bootstrap = kafka_sh(&["start", "--fresh", "--authorizer", name, "1", &port.to_string()]);
        Self { name: name.to_string(), bootstrap }
    }

    pub fn start(name: &str, port: u16) -> Self {
        let bootstrap = kafka_sh(&["start", "--fresh", name, "1", &port.to_string()]);
        Self { name: name.to_string(), bootstrap }
    }

    /// A cluster whose client listener is secured (`kafka.sh start --security sasl_ssl|mtls`):
    /// `bootstrap` is that listener; [`OwnCluster::internal`] is the PLAINTEXT one the tests'
    /// own clients use.
    pub fn start_secured(name: &str, port: u16, security: &str) -> Self {
        let bootstrap = kafka_sh(&["start", "--fresh", "--security", security, name, "1", &port.to_string()]);
        Self { name: name.to_string(), bootstrap }
    }

    /// The PLAINTEXT bootstrap of a secured cluster (its `bootstrap` otherwise).
    pub fn internal(&self) -> String {
        kafka_sh(&["internal", &self.name])
    }

    /// A file `kafka.sh start --security` made in the cluster's `secrets/` directory.
    pub fn secret_path(&self, file: &str) -> String {
        let state = std::env::var("STRAIT_KAFKA_DIR").unwrap_or_else(|_| "/tmp/strait-kafka".into());
        format!("{state}/{}/secrets/{file}", self.name)
    }

    /// The contents of such a file, trimmed (the passwords).
    pub fn secret(&self, file: &str) -> String {
        let path = self.secret_path(file);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")).trim().to_string()
    }

    /// The pids of its broker processes.
    pub fn pids(&self) -> Vec<String> {
        let out = Command::new("bash")
            .arg(repo_root().join("scripts/kafka.sh"))
            .args(["pids", &self.name])
            .output()
            .expect("kafka.sh");
        assert!(out.status.success(), "kafka.sh pids {}: {}", self.name, String::from_utf8_lossy(&out.stderr));
        let pids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect();
        assert!(!pids.is_empty(), "cluster {} has no running broker", self.name);
        pids
    }

    /// SIGSTOP to every broker: connections stay open and nothing answers.
    pub fn freeze(&self) {
        let status = Command::new("kill").arg("-STOP").args(self.pids()).status().expect("kill");
        assert!(status.success(), "kill -STOP {}", self.name);
    }

    /// SIGCONT to every broker.
    pub fn thaw(&self) {
        let status = Command::new("kill").arg("-CONT").args(self.pids()).status().expect("kill");
        assert!(status.success(), "kill -CONT {}", self.name);
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        // Not kafka_sh: a panic while a failed test unwinds would abort the test binary.
        let _ = Command::new("bash").arg(repo_root().join("scripts/kafka.sh")).args(["stop", &self.name]).output();
    }
}

/// Tests of one binary that measure rates or gaps take this so they do not share two cores.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Source partitions of `flow` the process reads (its share of the flow's tasks).
pub fn partitions_read(strait: &Strait, flow: &str) -> f64 {
    strait.metric("strait_source_partitions_assigned", &[("flow", flow)]).unwrap_or(0.0)
}

/// The logs of several processes, each under its index, for a failure message.
pub fn member_logs(members: &[Strait]) -> String {
    members.iter().enumerate().map(|(i, m)| format!("--- member {i}:\n{}", m.log_text())).collect()
}
