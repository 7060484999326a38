//! The three contenders and exactly how each is run. Every run gets a fresh source alias or
//! target topic, so each drains the whole backlog into a fresh topic.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;
use serde::Serialize;

use crate::kafka::{Across, Stand};
use crate::spawn;

/// Who replicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Contender {
    /// `strait-ceiling`: a bare rdkafka consume-produce loop.
    Ceiling,
    /// `strait run` with the default (WASM) policy and every default: offset syncs,
    /// checkpoints, group sync and heartbeats on.
    Strait,
    /// strait with the WAN profile of docs/performance.md for the side across the link: 4 MiB
    /// producer batches and a 64 MiB producer queue producing across, 10 MiB partition fetches
    /// into a 64 MiB prefetch consuming across; run only when `--only` names it.
    #[value(name = "strait-wan")]
    #[serde(rename = "strait-wan")]
    StraitWan,
    /// MirrorMaker 2 from Maven Central, dedicated mode.
    Mm2,
    /// MirrorMaker 2 with its clients' defaults (the bench's `mm2` sets 1 MB batches and 2000
    /// records a poll); run only when `--only` names it.
    #[value(name = "mm2-stock")]
    #[serde(rename = "mm2-stock")]
    Mm2Stock,
    /// MirrorMaker 2 with the tuning its documentation gives for distance and volume; run only
    /// when `--only` names it.
    #[value(name = "mm2-wan")]
    #[serde(rename = "mm2-wan")]
    Mm2Wan,
    /// `strait-passthrough`: record batches forwarded undecoded (a prototype, issue 33 item 5);
    /// run only when `--only` names it.
    Passthrough,
}

impl Contender {
    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Contender::Ceiling => "ceiling",
            Contender::Strait => "strait",
            Contender::StraitWan => "strait-wan",
            Contender::Mm2 => "mm2",
            Contender::Mm2Stock => "mm2-stock",
            Contender::Mm2Wan => "mm2-wan",
            Contender::Passthrough => "passthrough",
        }
    }

    /// The settings it runs with, for the results file.
    /// `across` is the side the WAN profile is for (`Stand::across`).
    pub fn settings(self, partitions: i32, codec: &str, strait_extra: &[String], across: Across) -> String {
        let tried = if strait_extra.is_empty() {
            String::new()
        } else {
            format!("; tried here: `{}`", strait_extra.join("`, `"))
        };
        match self {
            Contender::Ceiling => format!(
                "one rdkafka consumer (assign, 64 MiB prefetch, 10 MiB per partition fetch, fetch.wait.max.ms=100, fetch.queue.backoff.ms=5) and \
                 one rdkafka producer (idempotent, acks=all, linger.ms=5, batch.size=1000000, compression.type={codec}, a 1 GiB queue, reports served \
                 every 1000 records), no client telemetry, one thread"
            ),
            Contender::Strait => format!(
                "strait defaults: 8 MiB consumer prefetch (4 MiB per partition fetch, fetch.queue.backoff.ms=5), idempotent producer (compression.type={codec}; lz4 is the default), with a \
                 16 MiB queue (100,000 records at most), acks=all, linger.ms=5, batches of 2000 records or 1 MiB, 2 batches per channel, WASM default policy, \
                 offset syncs, checkpoints and group offset sync every 5 s, heartbeats every 1 s{tried}"
            ),
            Contender::StraitWan => {
                let (side, profile) = match across {
                    Across::Target => ("target side (producing across)", STRAIT_WAN),
                    Across::Source => ("source side (consuming across)", STRAIT_WAN_SOURCE),
                };
                format!(
                    "{}; with the WAN profile for the {side}: `{}`",
                    Contender::Strait.settings(partitions, codec, strait_extra, across),
                    profile.replace('\n', "`, `")
                )
            }
            Contender::Mm2Wan => format!(
                "{}; with the tuning MM2's documentation gives for distance and volume: Kafka's (\"Datacenters\": larger socket buffers for producer and consumer; -1 here, the OS's autotuning) and Red Hat Streams' \"MirrorMaker 2 for high-volume messages\" (the producer's and consumer's settings, which replace the ones above): `{}`",
                Contender::Mm2.settings(partitions, codec, strait_extra, across),
                MM2_WAN.replace('\n', "`, `").trim_end_matches(", `").trim_end_matches('`')
            ),
            Contender::Mm2Stock => format!(
                "MirrorMaker 2 dedicated mode with its launcher's heap (-Xms256M -Xmx2G), tasks.max={partitions}, its clients' defaults (Kafka 4: producer batch.size=16384, linger.ms=5; \
                 consumer max.poll.records=500, fetch.max.bytes 50 MiB, max.partition.fetch.bytes 1 MiB) but producer compression.type={codec}, offset syncs and \
                 checkpoints at their defaults, heartbeats on, sync.topic.acls.enabled=false"
            ),
            Contender::Mm2 => format!(
                "MirrorMaker 2 dedicated mode with its launcher's heap (-Xms256M -Xmx2G), tasks.max={partitions}, producer linger.ms=5 batch.size=1000000 compression.type={codec} (acks=all, idempotent: \
                 Connect's defaults), consumer max.poll.records=2000, offset syncs and checkpoints at their defaults, heartbeats on, \
                 sync.topic.acls.enabled=false"
            ),
            Contender::Passthrough => "fetched record batches forwarded undecoded: one thread per source broker fetching (10 MiB per \
                 partition, 50 MiB per fetch, fetch.wait.max.ms=100), per target broker one thread producing (idempotent, acks=all, one \
                 batch per partition per request, 5 requests in flight) and one reading answers; the batches keep the source's \
                 compression, so the codec is not applied"
                .to_string(),
        }
    }
}

/// strait's WAN profile (docs/performance.md), added to its config as the lines they are: larger
/// producer batches, so that the five requests librdkafka keeps in flight on a connection carry
/// 20 MiB per round trip instead of 5 (the target's topics must take 5 MiB batches: the stand
/// raises its target brokers' `message.max.bytes`), and a producer queue that holds several
/// round trips of them (a 16 MiB queue kept full against a long round trip cost half a core).
const STRAIT_WAN: &str = "us-west.producer.batch.size = 4194304\nus-west.producer.message.max.bytes = 5242880\n\
    us-west.producer.queue.buffering.max.kbytes = 65536\nus-west.producer.queue.buffering.max.messages = 1000000";

/// The WAN profile's lines for a source across the link, with `@SOURCE@` for the source alias:
/// a partition's fetch brings 10 MiB and the prefetch holds 64 MiB, so the one fetch the
/// consumer keeps in flight per source broker carries more per round trip (the bare loop, which
/// fetches so, kept 0.86 of its loopback drain 100 ms away; strait's defaults 0.44).
const STRAIT_WAN_SOURCE: &str =
    "@SOURCE@.consumer.max.partition.fetch.bytes = 10485760\n@SOURCE@.consumer.queued.max.messages.kbytes = 65536";

/// MM2's documented tuning for distance and volume, with `@SOURCE@` for the source alias: Kafka's
/// documentation ("Datacenters") raises the clients' socket buffers for high-latency links, and
/// Red Hat Streams' guide to MirrorMaker 2 with high volumes gives the batch, linger and fetch
/// sizes.
const MM2_WAN: &str = "us-west.producer.send.buffer.bytes = -1\n@SOURCE@.consumer.receive.buffer.bytes = -1\n\
us-west.producer.batch.size = 327680\nus-west.producer.linger.ms = 100\n@SOURCE@.consumer.fetch.max.bytes = 52428800\n\
@SOURCE@.consumer.max.partition.fetch.bytes = 1048576\n@SOURCE@.consumer.max.poll.records = 500\n";

/// The batch and poll sizes the bench's `mm2` has always run with (and `mm2-wan` starts from).
fn mm2_batches(alias: &str) -> String {
    format!("us-west.producer.linger.ms = 5\nus-west.producer.batch.size = 1000000\n{alias}.consumer.max.poll.records = 2000\n")
}

/// A contender replicating.
pub struct Running {
    /// Its process (for MM2, the JVM: `kafka.sh mm2` execs it), killed when this is dropped.
    pub child: spawn::KillOnDrop,
    /// Where its records land on us-west.
    pub target_topic: String,
    /// strait's metrics port.
    pub metrics_port: Option<u16>,
}

/// Starts `contender` replicating `source_topic` (with `partitions`) from us-east to us-west;
/// `run` makes its names unique, `out` holds its config and log.
pub fn start(
    contender: Contender,
    stand: &Stand,
    source_topic: &str,
    partitions: i32,
    run: &str,
    out: &Path,
) -> anyhow::Result<Running> {
    let log = File::create(out.join(format!("{run}.log"))).context("log file")?;
    let bin = |name: &str| -> anyhow::Result<PathBuf> {
        Ok(std::env::current_exe().context("own path")?.parent().context("own directory")?.join(name))
    };
    let alias = run.replace(['-', '.'], "");
    let config = |text: String| -> anyhow::Result<PathBuf> {
        let path = out.join(format!("{run}.properties"));
        std::fs::write(&path, text).context("config file")?;
        Ok(path)
    };
    let common = format!(
        "clusters = {alias}, us-west\n{alias}.bootstrap.servers = {}\nus-west.bootstrap.servers = {}\n{alias}->us-west.enabled = true\n\
         {alias}->us-west.topics = {source_topic}\nreplication.factor = 1\nus-west.producer.compression.type = {}\n",
        stand.east, stand.west, stand.codec
    );
    let mut metrics_port = None;
    let (child, target_topic) = match contender {
        Contender::Ceiling | Contender::Passthrough => {
            let (name, program) = match contender {
                Contender::Ceiling => ("ceiling", "strait-ceiling"),
                _ => ("passthrough", "strait-passthrough"),
            };
            let target = format!("{name}-{run}");
            stand.create_topic(false, &target, partitions)?;
            let child = Command::new(bin(program)?)
                .args([&stand.east, &stand.west, source_topic, &target, &partitions.to_string(), &stand.codec])
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .with_context(|| {
                    format!("starting {program} (build it with `cargo build --release -p strait-bench`)")
                })?;
            (child, target)
        }
        Contender::Strait | Contender::StraitWan => {
            // `@SOURCE@` in a tried setting stands for this run's source alias.
            let profile = match (contender, stand.across) {
                (Contender::StraitWan, Across::Source) => {
                    format!("{}\n", STRAIT_WAN_SOURCE.replace("@SOURCE@", &alias))
                }
                (Contender::StraitWan, Across::Target) => format!("{STRAIT_WAN}\n"),
                _ => String::new(),
            };
            let path = config(format!("{common}{}{profile}", stand.strait_extra.replace("@SOURCE@", &alias)))?;
            let (child, port) = spawn::strait(&bin("strait")?, &path, log)?;
            metrics_port = Some(port);
            (child, format!("{alias}.{source_topic}"))
        }
        Contender::Mm2 | Contender::Mm2Stock | Contender::Mm2Wan => {
            // Later lines win in MM2's properties, so the WAN tuning replaces the bench's batch settings.
            let tuning = match contender {
                Contender::Mm2Stock => String::new(),
                Contender::Mm2Wan => format!("{}{}", mm2_batches(&alias), MM2_WAN.replace("@SOURCE@", &alias)),
                _ => mm2_batches(&alias),
            };
            let path = config(format!(
                "{common}tasks.max = {partitions}\ncheckpoints.topic.replication.factor = 1\nheartbeats.topic.replication.factor = 1\n\
                 offset-syncs.topic.replication.factor = 1\noffset.storage.replication.factor = 1\nstatus.storage.replication.factor = 1\n\
                 config.storage.replication.factor = 1\nsync.topic.acls.enabled = false\n{tuning}"
            ))?;
            let child = spawn::mm2(&stand.root, &path, log)?;
            (child, format!("{alias}.{source_topic}"))
        }
    };
    Ok(Running { child: spawn::KillOnDrop(child), target_topic, metrics_port })
}
