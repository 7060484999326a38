//! strait processes: a config for the stand, `strait run` and its metrics, the CLI.

use super::*;

/// A free loopback port for a strait metrics endpoint.
///
/// The port is free when asked, not reserved: the kernel may give it again to the next caller
/// before its process binds it (two members of one test once got the same one), so a port
/// handed out once in this process is never handed out again.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
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
        self.get("/metrics").1
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

/// Builds (once per test binary, one build at a time) the policy component `plugins/LANG/NAME`
/// written in Python or JavaScript with `scripts/polyglot.sh`, and returns its path.
pub fn polyglot(lang: &str, name: &str) -> PathBuf {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/polyglot.sh"))
        .args(["path", lang, name])
        .output()
        .expect("scripts/polyglot.sh");
    assert!(
        out.status.success(),
        "building plugins/{lang}/{name} failed (it needs python3 with venv and node with npm):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    repo_root().join(String::from_utf8_lossy(&out.stdout).trim())
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

    /// `GET path` on the process's metrics listener: (status, body); (0, "") when it does not
    /// answer.
    pub fn get(&self, path: &str) -> (u16, String) {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.metrics_port)) else {
            return (0, String::new());
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes());
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        let status = answer.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        (status, body)
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

/// Source partitions of `flow` the process reads (its share of the flow's tasks).
pub fn partitions_read(strait: &Strait, flow: &str) -> f64 {
    strait.metric("strait_source_partitions_assigned", &[("flow", flow)]).unwrap_or(0.0)
}

/// The logs of several processes, each under its index, for a failure message.
pub fn member_logs(members: &[Strait]) -> String {
    members.iter().enumerate().map(|(i, m)| format!("--- member {i}:\n{}", m.log_text())).collect()
}
