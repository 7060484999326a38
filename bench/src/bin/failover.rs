//! `strait-failover`: the seed articles' failover scenario run with real MirrorMaker 2 and with
//! strait on the same stand, printing how many records each would make a failed-over group
//! re-read (issue 16, item 2: every figure the README gives for MM2 comes from MM2).
//!
//! Per scenario and contender: a fresh topic on us-east with 3 partitions is filled, the
//! contender replicates it to us-west, then a consumer group commits its offsets on us-east.
//! The contender's checkpoints (MM2's format, `<alias>.checkpoints.internal` on us-west, the
//! record `RemoteClusterUtils.translateOffsets` reads) are followed until they hold still for
//! [`STABLE`]; the group would resume there. Each copy is fresh and 1:1 (no transactions, no
//! filter), so the record at upstream offset o sits at downstream offset o: re-read =
//! committed - translated, skipped = translated - committed when that is positive.
//!
//! Usage: strait-failover   (run from the repository root; benches/failover.sh builds and runs it)

#[path = "../admin.rs"]
mod admin;
#[path = "../kafka.rs"]
// Only the stand and its topic clean-up are used here; the harness uses the rest.
#[allow(dead_code)]
mod kafka;
#[path = "../spawn.rs"]
mod spawn;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};
use strait_core::offsets::mm2::Checkpoint;

use kafka::Stand;

/// How long a group's checkpoints must stay unchanged to count as where it resumes: three of
/// strait's checkpoint rounds and fifteen of MM2's at the 1 s interval both run with.
const STABLE: Duration = Duration::from_secs(15);
/// The longest wait for the copy or for a stable checkpoint before the run is called failed.
const PATIENCE: Duration = Duration::from_secs(180);

/// One failover: records per partition, where the group committed, and `offset.lag.max`.
struct Scenario {
    name: &'static str,
    layout: [i64; 3],
    committed: [i64; 3],
    offset_lag_max: u32,
}

const SCENARIOS: [Scenario; 4] = [
    Scenario {
        name: "seed: 200 orders, group read 120",
        layout: [67, 67, 66],
        committed: [40, 40, 40],
        offset_lag_max: 100,
    },
    Scenario {
        name: "seed: 200 orders, group read 120",
        layout: [67, 67, 66],
        committed: [40, 40, 40],
        offset_lag_max: 0,
    },
    Scenario {
        name: "uneven split, group read 120",
        layout: [150, 40, 10],
        committed: [90, 25, 5],
        offset_lag_max: 100,
    },
    Scenario {
        name: "group far behind: 3,000 records, group read 1,500",
        layout: [1000, 1000, 1000],
        committed: [100, 500, 900],
        offset_lag_max: 100,
    },
];

#[derive(Clone, Copy, PartialEq)]
enum Contender {
    Mm2,
    Strait,
}

impl Contender {
    fn name(self) -> &'static str {
        match self {
            Contender::Mm2 => "mm2",
            Contender::Strait => "strait",
        }
    }
}

/// Where one contender left the group: translated offset per partition.
type Translated = [i64; 3];

fn main() -> anyhow::Result<()> {
    let root = std::env::current_dir().context("current directory")?;
    let stand = Stand::start(&root, None)?;
    let out = root.join("target/failover-bench");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    println!(
        "| scenario | offset.lag.max | committed | MM2 resumes at | MM2 re-read / skipped | strait resumes at | strait re-read / skipped |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (i, scenario) in SCENARIOS.iter().enumerate() {
        let mut cells = Vec::new();
        for contender in [Contender::Mm2, Contender::Strait] {
            let run = format!("fo{stamp}s{i}{}", contender.name());
            let result = replicate_and_fail_over(&stand, scenario, contender, &run, &out);
            stand.delete_topics(&run);
            let translated = result.with_context(|| {
                format!("{} on `{}` (log: {}/{run}.log)", contender.name(), scenario.name, out.display())
            })?;
            cells.push(format!("{translated:?}"));
            cells.push(rereads_and_skips(&scenario.committed, &translated));
        }
        println!(
            "| {} | {} | {:?} | {} |",
            scenario.name,
            scenario.offset_lag_max,
            scenario.committed,
            cells.join(" | ")
        );
    }
    Ok(())
}

/// "re-read / skipped" summed over the partitions.
fn rereads_and_skips(committed: &[i64; 3], translated: &Translated) -> String {
    let rereads: i64 = committed.iter().zip(translated).map(|(c, t)| (c - t).max(0)).sum();
    let skipped: i64 = committed.iter().zip(translated).map(|(c, t)| (t - c).max(0)).sum();
    format!("{rereads} / {skipped}")
}

fn replicate_and_fail_over(
    stand: &Stand,
    scenario: &Scenario,
    contender: Contender,
    run: &str,
    out: &Path,
) -> anyhow::Result<Translated> {
    let topic = format!("orders-{run}");
    let group = format!("orders-cg-{run}");
    let alias = run.to_string();
    admin::create_topics(&stand.east, std::slice::from_ref(&topic), 3)?;
    produce_layout(&stand.east, &topic, &scenario.layout)?;
    let child = start(stand, contender, scenario, &alias, &topic, &group, out)?;
    let _stop = spawn::KillOnDrop(child);

    let remote = format!("{alias}.{topic}");
    let total: i64 = scenario.layout.iter().sum();
    let started = Instant::now();
    let waited = |what: &str| -> anyhow::Result<()> {
        if started.elapsed() > PATIENCE {
            bail!("{remote} {what} on us-west within {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
        Ok(())
    };
    while !stand.target_exists(&remote) {
        waited("was not created")?;
    }
    let watch = stand.watermark_client()?;
    while Stand::target_records(&watch, &remote, 3) < total as u64 {
        waited(&format!("did not reach {total} records"))?;
    }
    commit(&stand.east, &group, &topic, &scenario.committed)?;
    stable_checkpoints(&stand.west, &format!("{alias}.checkpoints.internal"), &group, &remote)
}

/// Starts `contender` on a flow `alias`->us-west of `topic` for `group`, both checkpointing
/// every second and otherwise at their defaults (MM2: dedicated mode, a task per partition).
fn start(
    stand: &Stand,
    contender: Contender,
    scenario: &Scenario,
    alias: &str,
    topic: &str,
    group: &str,
    out: &Path,
) -> anyhow::Result<Child> {
    let common = format!(
        "clusters = {alias}, us-west\n{alias}.bootstrap.servers = {}\nus-west.bootstrap.servers = {}\n\
         {alias}->us-west.enabled = true\n{alias}->us-west.topics = {topic}\ngroups = {group}\n\
         offset.lag.max = {}\nemit.checkpoints.interval.seconds = 1\nreplication.factor = 1\n",
        stand.east, stand.west, scenario.offset_lag_max
    );
    let text = match contender {
        Contender::Strait => common,
        // MM2 looks for new groups every 10 minutes by default: a second lets it find the group
        // committed after the copy.
        Contender::Mm2 => format!(
            "{common}tasks.max = 3\nrefresh.groups.interval.seconds = 1\nsync.topic.acls.enabled = false\n\
             checkpoints.topic.replication.factor = 1\nheartbeats.topic.replication.factor = 1\n\
             offset-syncs.topic.replication.factor = 1\noffset.storage.replication.factor = 1\n\
             status.storage.replication.factor = 1\nconfig.storage.replication.factor = 1\n"
        ),
    };
    let config: PathBuf = out.join(format!("{alias}.properties"));
    std::fs::write(&config, text).with_context(|| format!("writing {}", config.display()))?;
    let log = File::create(out.join(format!("{alias}.log"))).context("log file")?;
    match contender {
        Contender::Mm2 => spawn::mm2(&stand.root, &config, log),
        Contender::Strait => {
            let bin = std::env::current_exe().context("own path")?.with_file_name("strait");
            Ok(spawn::strait(&bin, &config, log)?.0)
        }
    }
}

/// Writes `layout[p]` records to partition p, keyed like the seed's orders.
fn produce_layout(bootstrap: &str, topic: &str, layout: &[i64; 3]) -> anyhow::Result<()> {
    let producer: BaseProducer =
        ClientConfig::new().set("bootstrap.servers", bootstrap).set("acks", "all").create().context("producer")?;
    for (p, &n) in layout.iter().enumerate() {
        for i in 0..n {
            let (key, value) = (format!("order-{p}-{i}"), i.to_string());
            let mut record = BaseRecord::to(topic).partition(p as i32).key(&key).payload(&value);
            // A full queue is emptied by polling and the record offered again.
            while let Err((_, back)) = producer.send(record) {
                producer.poll(Duration::from_millis(10));
                record = back;
            }
        }
    }
    producer.flush(Duration::from_secs(30)).with_context(|| format!("producing into {topic}"))
}

/// Commits `offsets` (one per partition of `topic`) for `group` on `bootstrap`, as a consumer
/// that read that far would.
fn commit(bootstrap: &str, group: &str, topic: &str, offsets: &[i64; 3]) -> anyhow::Result<()> {
    let consumer: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", bootstrap).set("group.id", group).create().context("consumer")?;
    let mut tpl = TopicPartitionList::new();
    for (p, &o) in offsets.iter().enumerate() {
        tpl.add_partition_offset(topic, p as i32, Offset::Offset(o))?;
    }
    consumer.commit(&tpl, CommitMode::Sync).with_context(|| format!("committing {group}'s offsets"))
}

/// Follows `group`'s checkpoints for `remote` on `bootstrap` until every partition has one and
/// none changed for [`STABLE`].
fn stable_checkpoints(bootstrap: &str, checkpoints: &str, group: &str, remote: &str) -> anyhow::Result<Translated> {
    let started = Instant::now();
    let mut seen: Option<(Translated, Instant)> = None;
    loop {
        let latest = read_checkpoints(bootstrap, checkpoints, group, remote)?;
        if let [Some(a), Some(b), Some(c)] = [0, 1, 2].map(|p| latest.get(&p).copied()) {
            let now = [a, b, c];
            match seen {
                Some((before, since)) if before == now => {
                    if since.elapsed() >= STABLE {
                        return Ok(now);
                    }
                }
                _ => seen = Some((now, Instant::now())),
            }
        }
        if started.elapsed() > PATIENCE {
            bail!("{group}'s checkpoints for {remote} did not settle within {PATIENCE:?}: last {latest:?}");
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The latest checkpoint of `group` per partition of `remote`: downstream offset.
fn read_checkpoints(bootstrap: &str, topic: &str, group: &str, remote: &str) -> anyhow::Result<BTreeMap<i32, i64>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "strait-failover-bench")
        .set("enable.auto.commit", "false")
        .create()
        .context("checkpoint reader")?;
    let mut latest = BTreeMap::new();
    let Ok((_, high)) = consumer.fetch_watermarks(topic, 0, Duration::from_secs(5)) else {
        return Ok(latest); // not created yet
    };
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)?;
    consumer.assign(&tpl)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut next = 0;
    while next < high {
        if Instant::now() > deadline {
            bail!("reading {topic} stopped at offset {next} of {high}");
        }
        let Some(m) = consumer.poll(Duration::from_millis(500)) else { continue };
        let m = m.with_context(|| format!("reading {topic}"))?;
        next = m.offset() + 1;
        let decoded = m.payload().and_then(|v| Checkpoint::decode(m.key().unwrap_or_default(), v));
        if let Some(c) = decoded.filter(|c| c.group == group && c.topic == remote) {
            latest.insert(c.partition, c.downstream);
        }
    }
    Ok(latest)
}
