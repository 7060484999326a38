//! The clusters: the shared stand `scripts/kafka.sh` starts, clusters of a test's own, and
//! topic administration.

use super::*;

/// The seed articles' stand: `us-east` with 3 brokers, `us-west` with 1.
pub struct Stand {
    pub east: String,
    pub west: String,
}

/// Runs `scripts/kafka.sh` and returns its last stdout line; panics with its output on failure.
pub fn kafka_sh(args: &[&str]) -> String {
    last_line(&script("kafka.sh", args, "this test needs real Kafka"))
}

/// Runs `scripts/SCRIPT ARGS` and returns its stdout; panics with its output on failure, saying
/// what the test needs.
pub(super) fn script(name: &str, args: &[&str], needs: &str) -> String {
    script_with_env(name, args, &[], needs)
}

/// [`script`] with `env` added to the script's environment.
fn script_with_env(name: &str, args: &[&str], env: &[(&str, &str)], needs: &str) -> String {
    // From the repository root: arguments may name files in it.
    let out = Command::new("bash")
        .current_dir(repo_root())
        .arg(repo_root().join("scripts").join(name))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("bash must be on PATH to run scripts/{name}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "scripts/{name} {args:?} failed ({}): {needs}.\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn last_line(stdout: &str) -> String {
    stdout.lines().last().unwrap_or_default().trim().to_string()
}

/// Runs `scripts/kafka.sh` from the repository root and returns its whole stdout.
pub fn kafka_sh_stdout(args: &[&str]) -> String {
    script("kafka.sh", args, "this test needs real Kafka")
}

/// Starts (or finds running) the shared stand. Tests use unique topic names, so they can share it.
pub fn stand() -> &'static Stand {
    static STAND: OnceLock<Stand> = OnceLock::new();
    STAND.get_or_init(|| Stand {
        east: kafka_sh(&["start", "us-east", "3", "19092"]),
        west: kafka_sh(&["start", "us-west", "1", "29092"]),
    })
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
        Self::start_brokers(name, 1, port)
    }

    /// A one-broker cluster a test freezes ([`OwnCluster::freeze`]) for up to five minutes. Its
    /// node is its own controller, which, on the thaw, would otherwise find the broker's session
    /// (9 s) expired and fence it: every partition loses its only leader for a moment, and the
    /// transaction coordinator, aborting the transactions that timed out meanwhile, skips the
    /// markers of the partitions it finds no leader for (Kafka 4.3.1 takes them for deleted).
    /// A position transaction so left open on strait's position topic holds back every read of
    /// it for good: that tests Kafka, not strait's handling of a target that does not answer.
    pub fn start_to_freeze(name: &str, port: u16) -> Self {
        Self::start_brokers_to_freeze(name, 1, port)
    }

    /// [`OwnCluster::start_to_freeze`] with `brokers` brokers, all of which a test freezes (its
    /// one controller among them).
    pub fn start_brokers_to_freeze(name: &str, brokers: u32, port: u16) -> Self {
        let bootstrap = last_line(&script_with_env(
            "kafka.sh",
            &["start", "--fresh", name, &brokers.to_string(), &port.to_string()],
            &[("EXTRA_BROKER_PROPS", "broker.session.timeout.ms=300000")],
            "this test needs real Kafka",
        ));
        Self { name: name.to_string(), bootstrap }
    }

    /// A cluster of `brokers` brokers on ports from `port`.
    pub fn start_brokers(name: &str, brokers: u32, port: u16) -> Self {
        let bootstrap = kafka_sh(&["start", "--fresh", name, &brokers.to_string(), &port.to_string()]);
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

/// A schema registry next to each cluster of the stand: their Confluent-compatible URLs.
pub struct Registries {
    pub east: String,
    pub west: String,
}

/// Starts (or finds running) a real registry next to each cluster (`scripts/registry.sh`).
pub fn registries() -> &'static Registries {
    static REGISTRIES: OnceLock<Registries> = OnceLock::new();
    REGISTRIES.get_or_init(|| Registries {
        east: start_registry("us-east", 18081, None),
        west: start_registry("us-west", 28081, None),
    })
}

/// Starts (or finds running) registry `name` on `port`, asking for `auth` (`user:password`)
/// when given; its Confluent-compatible URL.
pub fn start_registry(name: &str, port: u16, auth: Option<&str>) -> String {
    let port = port.to_string();
    let mut args = vec!["start", name, &port];
    args.extend(auth);
    registry_sh(&args)
}

/// Starts registry `name` on `port` over https, its certificate signed by a CA of its own: its
/// URL and the CA's PEM file.
pub fn start_tls_registry(name: &str, port: u16) -> (String, PathBuf) {
    let url = registry_sh(&["start", "--tls", name, &port.to_string()]);
    let dir = std::env::var("STRAIT_REGISTRY_DIR").unwrap_or_else(|_| "/tmp/strait-registry".into());
    (url, PathBuf::from(dir).join(name).join("ca.pem"))
}

/// Starts registry `name` on `port` of the kind that honours Confluent's IMPORT mode (a schema
/// registered under the id and version given); its URL.
pub fn start_import_registry(name: &str, port: u16) -> String {
    registry_sh(&["start", "--import", name, &port.to_string()])
}

/// Stops registry `name`.
pub fn stop_registry(name: &str) {
    registry_sh(&["stop", name]);
}

/// Runs `scripts/registry.sh` and returns its last stdout line; panics with its output on failure.
fn registry_sh(args: &[&str]) -> String {
    last_line(&script("registry.sh", args, "this test needs a real schema registry"))
}

/// Runs a real serializer tool (`scripts/serdes.sh TOOL ARGS`): its JSON lines.
pub fn serdes(args: &[&str]) -> Vec<serde_json::Value> {
    script("serdes.sh", args, "this test needs confluent-kafka's serializers")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("scripts/serdes.sh printed `{l}`: {e}")))
        .collect()
}
