//! The clusters, through `scripts/kafka.sh` (the same script the tests use) and rdkafka.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

/// Which cluster sits across a link with a round trip (`--rtt`): the contenders run next to the
/// other one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Across {
    /// Produce remotely: the contenders next to the source.
    Target,
    /// Consume remotely: the contenders next to the target.
    Source,
}

/// What the records' values hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Data {
    /// ProducerPerformance's random capital letters: nothing lz4 can shrink; loaded uncompressed.
    Random,
    /// JSON-like documents (orders with repeated field names and a small vocabulary), which
    /// shrink several times; the backlog is loaded lz4-compressed, as a compressing producer
    /// writes it.
    Json,
}

/// A link between the contenders and one cluster: `scripts/wan.sh` (Toxiproxy) in front of a
/// cluster started with `kafka.sh start --wan`.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Link {
    /// The cluster across it.
    pub across: Across,
    /// Round trip, ms (half each way), with a tenth of it as jitter.
    pub rtt_ms: u32,
}

/// The two clusters of the stand and the repository they are driven from.
pub struct Stand {
    /// The repository root.
    pub root: PathBuf,
    /// The source's bootstrap servers, as the contenders reach it (across the link, if it is).
    pub east: String,
    /// The target's, as the contenders reach it.
    pub west: String,
    /// The source's bootstrap servers for the bench's own producers (never across the link).
    pub east_tools: String,
    /// The target's, for the bench's own readers.
    pub west_tools: String,
    /// The source cluster's name for `kafka.sh`.
    pub east_name: String,
    /// The target's.
    pub west_name: String,
    /// The compression codec every contender's target producer uses (`--codec`).
    pub codec: String,
    /// Lines added to strait's config (`--strait-extra`), each ending in a newline.
    pub strait_extra: String,
    /// What the backlog's values hold (`--data`).
    pub data: Data,
    /// The side `--across` names: across the link when there is one; on loopback, the side
    /// whose WAN profile `strait-wan` takes, so that a sweep's loopback runs compare like with like.
    pub across: Across,
}

impl Stand {
    /// Starts (or finds running) us-east (3 brokers) and us-west (1 broker); with a link, the
    /// cluster across it is a cluster of its own behind the proxy: `bench-wan-east` (3 brokers;
    /// the WAN tests' 1-broker `wan-east` is another) or `wan-west` (1 broker, as the tests').
    pub fn start(root: &Path, link: Option<Link>) -> anyhow::Result<Self> {
        let cluster = |name: &str, brokers: &str, port: &str| -> anyhow::Result<(String, String, String)> {
            let b = kafka_sh(root, &["start", name, brokers, port])?;
            Ok((b.clone(), b, name.to_string()))
        };
        let far = |name: &str, brokers: &str, port: &str, rtt: u32| -> anyhow::Result<(String, String, String)> {
            script(root, "wan.sh", &["start"])?;
            let b = kafka_sh(root, &["start", "--wan", name, brokers, port])?;
            let tools = kafka_sh(root, &["internal", name])?;
            script(root, "wan.sh", &["link", name])?;
            script(root, "wan.sh", &["shape", name, &rtt.to_string(), &(rtt / 10).to_string()])?;
            Ok((b, tools, name.to_string()))
        };
        let ((east, east_tools, east_name), (west, west_tools, west_name)) = match link {
            None => (cluster("us-east", "3", "19092")?, cluster("us-west", "1", "29092")?),
            Some(Link { across: Across::Target, rtt_ms }) => {
                (cluster("us-east", "3", "19092")?, far("wan-west", "1", "14092", rtt_ms)?)
            }
            Some(Link { across: Across::Source, rtt_ms }) => {
                (far("bench-wan-east", "3", "12092", rtt_ms)?, cluster("us-west", "1", "29092")?)
            }
        };
        // The target's brokers take record batches of up to 5 MiB (Kafka's default is 1 MiB), so
        // strait's WAN profile can send 4 MiB batches; every contender writes to the same brokers.
        kafka_sh(
            root,
            &[
                "tool",
                "kafka.admin.ConfigCommand",
                "--bootstrap-server",
                &west_tools,
                "--entity-type",
                "brokers",
                "--entity-default",
                "--alter",
                "--add-config",
                "message.max.bytes=5242880",
            ],
        )?;
        Ok(Self {
            root: root.to_path_buf(),
            east,
            west,
            east_tools,
            west_tools,
            east_name,
            west_name,
            codec: "lz4".into(),
            strait_extra: String::new(),
            data: Data::Random,
            across: link.map_or(Across::Target, |l| l.across),
        })
    }

    /// Creates `topic` on the source (`east`) or the target with `partitions` and replication
    /// factor 1.
    pub fn create_topic(&self, east: bool, topic: &str, partitions: i32) -> anyhow::Result<()> {
        let cluster = if east { self.east_name.as_str() } else { self.west_name.as_str() };
        let p = partitions.to_string();
        kafka_sh(
            &self.root,
            &["topics", cluster, "--create", "--topic", topic, "--partitions", &p, "--replication-factor", "1"],
        )
        .map(drop)
    }

    /// Deletes every topic whose name contains `tag` on both clusters (backlogs, copies, and
    /// the replicators' internal topics), so repeated runs do not fill the disk.
    pub fn delete_topics(&self, tag: &str) {
        for cluster in [&self.east_name, &self.west_name] {
            let pattern = format!(".*{tag}.*");
            if let Err(e) = kafka_sh(&self.root, &["topics", cluster, "--delete", "--topic", &pattern]) {
                eprintln!("strait-bench: could not delete topics matching {pattern} on {cluster}: {e}");
            }
        }
    }

    /// Loads `records` records of `size` bytes into `topic` on us-east as fast as it goes, with
    /// values as `--data` says.
    pub fn preload(&self, topic: &str, records: u64, size: usize) -> anyhow::Result<()> {
        let status = self
            .producer_performance(topic, records, size, None, self.data)?
            .spawn()
            .context("starting ProducerPerformance")?
            .wait()
            .context("ProducerPerformance")?;
        if !status.success() {
            bail!("loading {topic} failed ({status})");
        }
        Ok(())
    }

    /// A producer writing `records` records of `size` bytes of `data` into `topic` on us-east
    /// at `rate` records per second, or as fast as it goes.
    pub fn producer_performance(
        &self,
        topic: &str,
        records: u64,
        size: usize,
        rate: Option<u64>,
        data: Data,
    ) -> anyhow::Result<Command> {
        // Random letters of the size, or JSON documents of it from a file, loaded compressed.
        let (payload, compression) = match data {
            Data::Random => (["--record-size".to_string(), size.to_string()], None),
            Data::Json => {
                let file = std::env::temp_dir().join(format!("strait-bench-json-{size}-{}.txt", std::process::id()));
                std::fs::write(&file, json_documents(size, 1000)).context("writing the JSON payload file")?;
                (["--payload-file".to_string(), file.to_string_lossy().into_owned()], Some("compression.type=lz4"))
            }
        };
        let records = records.to_string();
        let throughput = rate.map_or("-1".to_string(), |r| r.to_string());
        // Steady mode sends with a short linger, so the producer adds little to the latency.
        let linger = if rate.is_some() { "linger.ms=1" } else { "linger.ms=10" };
        let mut command = Command::new("bash");
        command
            .current_dir(&self.root)
            .args(["scripts/kafka.sh", "tool", "org.apache.kafka.tools.ProducerPerformance", "--topic", topic])
            .args(["--num-records", &records, "--throughput", &throughput, "--bootstrap-server", &self.east_tools])
            .args(&payload)
            .args(["--producer-props", "acks=1", linger, "batch.size=262144"])
            .args(compression)
            .stdout(Stdio::null());
        Ok(command)
    }

    /// A client on us-west for [`Stand::target_records`]. librdkafka remembers a topic it found
    /// missing, so it is made once the topic exists (see [`Stand::target_exists`]).
    pub fn watermark_client(&self) -> anyhow::Result<BaseConsumer> {
        ClientConfig::new()
            .set("bootstrap.servers", &self.west_tools)
            .set("group.id", "strait-bench")
            .create()
            .context("watermark client")
    }

    /// Whether `topic` exists on us-west, asked with a fresh client.
    pub fn target_exists(&self, topic: &str) -> bool {
        self.watermark_client()
            .ok()
            .and_then(|c| c.fetch_metadata(Some(topic), Duration::from_secs(5)).ok())
            .is_some_and(|md| {
                md.topics().iter().any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
            })
    }

    /// Bytes of `topic`'s log segments on us-west's brokers, read from their data directories
    /// (`scripts/kafka.sh` puts them under `$STRAIT_KAFKA_DIR`); 0 if none is found.
    pub fn target_log_bytes(&self, topic: &str) -> u64 {
        let base = std::env::var_os("STRAIT_KAFKA_DIR")
            .map_or_else(|| PathBuf::from("/tmp/strait-kafka"), PathBuf::from)
            .join(&self.west_name);
        let partition_dir = |name: &str| {
            name.strip_prefix(topic).and_then(|rest| rest.strip_prefix('-')).is_some_and(|p| p.parse::<u32>().is_ok())
        };
        let files =
            |dir: &Path| std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()).collect::<Vec<_>>();
        files(&base)
            .iter()
            .flat_map(|node| files(&node.join("data")))
            .filter(|dir| dir.file_name().and_then(|n| n.to_str()).is_some_and(partition_dir))
            .flat_map(|dir| files(&dir))
            .filter(|f| f.extension().is_some_and(|e| e == "log"))
            .filter_map(|f| f.metadata().ok())
            .map(|m| m.len())
            .sum()
    }

    /// Records in `topic` on us-west (sum of high watermarks).
    pub fn target_records(client: &BaseConsumer, topic: &str, partitions: i32) -> u64 {
        (0..partitions)
            .map(|p| {
                client.fetch_watermarks(topic, p, Duration::from_secs(5)).map_or(0, |(_, high)| high.max(0) as u64)
            })
            .sum()
    }
}

/// Runs `scripts/kafka.sh ARGS` and returns its last stdout line.
pub fn kafka_sh(root: &Path, args: &[&str]) -> anyhow::Result<String> {
    script(root, "kafka.sh", args)
}

/// Runs `scripts/NAME ARGS` and returns its last stdout line.
fn script(root: &Path, name: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("bash")
        .current_dir(root)
        .arg(format!("scripts/{name}"))
        .args(args)
        .output()
        .with_context(|| format!("running scripts/{name}"))?;
    if !out.status.success() {
        bail!("scripts/{name} {args:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_string())
}

/// `count` JSON-like order documents of exactly `size` bytes each, one per line: field names
/// repeat and values come from a small vocabulary, as in the event streams operators replicate.
fn json_documents(size: usize, count: u32) -> String {
    const WORDS: [&str; 12] = [
        "shipped", "pending", "express", "standard", "gift", "fragile", "returned", "paid", "north", "south", "retail",
        "online",
    ];
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: u64| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    let mut out = String::new();
    for id in 0..count {
        let mut doc = format!(
            "{{\"id\":{},\"customer\":\"customer-{:04}\",\"status\":\"{}\",\"items\":[",
            100_000 + id,
            next(5000),
            WORDS[next(12) as usize]
        );
        while doc.len() + 60 < size {
            doc += &format!(
                "{{\"sku\":\"sku-{:03}\",\"qty\":{},\"price\":{}.{:02}}},",
                next(500),
                1 + next(9),
                next(200),
                next(100)
            );
        }
        doc += "],\"note\":\"";
        while doc.len() < size {
            doc += WORDS[next(12) as usize];
            doc.push(' ');
        }
        doc.truncate(size.saturating_sub(2).max(1));
        doc += "\"}";
        doc.truncate(size);
        out += &doc;
        out.push('\n');
    }
    out
}
