//! The clusters, through `scripts/kafka.sh` (the same script the tests use) and rdkafka.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

/// The two clusters of the stand and the repository they are driven from.
pub struct Stand {
    /// The repository root.
    pub root: PathBuf,
    /// us-east's bootstrap servers.
    pub east: String,
    /// us-west's bootstrap servers.
    pub west: String,
    /// The compression codec every contender's target producer uses (`--codec`).
    pub codec: String,
    /// Lines added to strait's config (`--strait-extra`), each ending in a newline.
    pub strait_extra: String,
}

impl Stand {
    /// Starts (or finds running) us-east (3 brokers) and us-west (1 broker).
    pub fn start(root: &Path) -> anyhow::Result<Self> {
        let east = kafka_sh(root, &["start", "us-east", "3", "19092"])?;
        let west = kafka_sh(root, &["start", "us-west", "1", "29092"])?;
        Ok(Self { root: root.to_path_buf(), east, west, codec: "lz4".into(), strait_extra: String::new() })
    }

    /// Creates `topic` on us-east (`east`) or us-west with `partitions` and replication factor 1.
    pub fn create_topic(&self, east: bool, topic: &str, partitions: i32) -> anyhow::Result<()> {
        let cluster = if east { "us-east" } else { "us-west" };
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
        for cluster in ["us-east", "us-west"] {
            let pattern = format!(".*{tag}.*");
            if let Err(e) = kafka_sh(&self.root, &["topics", cluster, "--delete", "--topic", &pattern]) {
                eprintln!("strait-bench: could not delete topics matching {pattern} on {cluster}: {e}");
            }
        }
    }

    /// Loads `records` records of `size` bytes into `topic` on us-east as fast as it goes.
    pub fn preload(&self, topic: &str, records: u64, size: usize) -> anyhow::Result<()> {
        let status = self.producer_performance(topic, records, size, None)?.wait().context("ProducerPerformance")?;
        if !status.success() {
            bail!("loading {topic} failed ({status})");
        }
        Ok(())
    }

    /// Starts a producer writing `records` records of `size` bytes into `topic` on us-east at
    /// `rate` records per second, or as fast as it goes.
    pub fn producer_performance(
        &self,
        topic: &str,
        records: u64,
        size: usize,
        rate: Option<u64>,
    ) -> anyhow::Result<Child> {
        let (records, size) = (records.to_string(), size.to_string());
        let throughput = rate.map_or("-1".to_string(), |r| r.to_string());
        // Steady mode sends with a short linger, so the producer adds little to the latency.
        let linger = if rate.is_some() { "linger.ms=1" } else { "linger.ms=10" };
        Command::new("bash")
            .current_dir(&self.root)
            .args(["scripts/kafka.sh", "tool", "org.apache.kafka.tools.ProducerPerformance", "--topic", topic])
            .args([
                "--num-records",
                &records,
                "--record-size",
                &size,
                "--throughput",
                &throughput,
                "--bootstrap-server",
                &self.east,
            ])
            .args(["--producer-props", "acks=1", linger, "batch.size=262144"])
            .stdout(Stdio::null())
            .spawn()
            .context("starting ProducerPerformance")
    }

    /// A client on us-west for [`Stand::target_records`]. librdkafka remembers a topic it found
    /// missing, so it is made once the topic exists (see [`Stand::target_exists`]).
    pub fn watermark_client(&self) -> anyhow::Result<BaseConsumer> {
        ClientConfig::new()
            .set("bootstrap.servers", &self.west)
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
            .join("us-west");
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
    let out = Command::new("bash")
        .current_dir(root)
        .arg("scripts/kafka.sh")
        .args(args)
        .output()
        .context("running scripts/kafka.sh")?;
    if !out.status.success() {
        bail!("scripts/kafka.sh {args:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_string())
}
