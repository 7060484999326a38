//! What an operator pays per flow: strait and real MirrorMaker 2 run the same config of N flows
//! (source aliases `f1`..`fN`, all on us-east, each replicating a topic of its own to us-west),
//! for each N asked; once every remote topic exists and a settling pause passed, each process's
//! threads, RSS and CPU are read over an idle window and again under a moderate load spread over
//! the N topics. Prints a Markdown table, and the cost of each flow added.
//!
//! Usage: strait-flows EAST WEST COUNTS (e.g. 1,20)
//! (benches/flows.sh builds it and strait, starts the stand and runs it from the repository root.)

#[path = "../admin.rs"]
mod admin;
#[path = "../process.rs"]
// Only `cpu_seconds` is used here; the harness uses the rest.
#[allow(dead_code)]
mod process;
#[path = "../spawn.rs"]
mod spawn;

use std::path::Path;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

/// Partitions of each flow's topic.
const PARTITIONS: i32 = 3;
/// After every flow is up, before anything is measured (start-up work, first metadata rounds).
const SETTLE: Duration = Duration::from_secs(20);
/// Each measuring window.
const WINDOW: Duration = Duration::from_secs(30);
/// The moderate load: records per second over all the flows' topics, of `VALUE` bytes.
const LOAD_RATE: u64 = 2_000;
const VALUE: usize = 1024;

#[derive(Clone, Copy, PartialEq)]
enum Who {
    Strait,
    Mm2,
}

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::Strait => "strait",
            Who::Mm2 => "mm2",
        }
    }
}

/// One contender's figures at one flow count.
struct Figures {
    who: Who,
    flows: usize,
    threads: u64,
    idle_rss_mib: f64,
    idle_cpu_percent: f64,
    load_rss_mib: f64,
    load_cpu_percent: f64,
    ready_seconds: f64,
}

impl Figures {
    /// Its row of the Markdown table.
    fn row(&self) -> String {
        format!(
            "| {} | {} | {:.0} | {} | {:.0} | {:.2} | {:.0} | {:.1} |",
            self.who.name(),
            self.flows,
            self.ready_seconds,
            self.threads,
            self.idle_rss_mib,
            self.idle_cpu_percent,
            self.load_rss_mib,
            self.load_cpu_percent
        )
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [east, west, counts] = args.as_slice() else {
        bail!("usage: strait-flows EAST WEST COUNTS (e.g. 1,20)");
    };
    let counts: Vec<usize> = counts
        .split(',')
        .map(|c| c.trim().parse().context("COUNTS: numbers separated by commas"))
        .collect::<Result<_, _>>()?;
    let root = std::env::current_dir().context("current directory")?;
    let out = std::env::temp_dir().join(format!("strait-flows-{}", std::process::id()));
    std::fs::create_dir_all(&out).context("log directory")?;
    eprintln!("strait-flows: logs and configs in {}", out.display());
    let mut all = Vec::new();
    for &n in &counts {
        // STRAIT_FLOWS_ONLY=strait (or mm2) runs one contender, for looking into one.
        let only = std::env::var("STRAIT_FLOWS_ONLY").ok();
        for who in [Who::Strait, Who::Mm2].into_iter().filter(|w| only.as_deref().is_none_or(|o| o == w.name())) {
            // Fresh topics per run: each contender starts from empty topics and its own names.
            let tag = format!("fl{}{}{n}", std::process::id(), who.name());
            let topics: Vec<String> = (1..=n).map(|i| format!("flows-{tag}-{i}")).collect();
            admin::create_topics(east, &topics, PARTITIONS)?;
            let f = measure(who, &root, &out, east, west, &topics, &tag)?;
            eprintln!("{}", f.row());
            all.push(f);
        }
    }
    print_table(&all, &counts);
    Ok(())
}

/// The config both contenders run: flow `fI->us-west` replicates topic I.
fn config(who: Who, east: &str, west: &str, topics: &[String]) -> String {
    let aliases: Vec<String> = (1..=topics.len()).map(|i| format!("f{i}")).collect();
    let mut c = format!(
        "clusters = {}, us-west\nus-west.bootstrap.servers = {west}\nreplication.factor = 1\n",
        aliases.join(", ")
    );
    for (alias, topic) in aliases.iter().zip(topics) {
        c += &format!(
            "{alias}.bootstrap.servers = {east}\n{alias}->us-west.enabled = true\n{alias}->us-west.topics = {topic}\n"
        );
    }
    if who == Who::Mm2 {
        // MM2 builds a Connect herder for every ordered pair of clusters whose heartbeats are on,
        // enabled or not: 420 for 21 aliases, which it never finished starting here in 10
        // minutes. Heartbeats only where a flow runs is what an MM2 operator writes.
        c += "emit.heartbeats.enabled = false\n";
        for alias in &aliases {
            c += &format!("{alias}->us-west.emit.heartbeats.enabled = true\n");
        }
        // The stand's us-west has one broker; MM2's own topics default to 3 replicas.
        c += "checkpoints.topic.replication.factor = 1\nheartbeats.topic.replication.factor = 1\noffset-syncs.topic.replication.factor = 1\n\
              offset.storage.replication.factor = 1\nstatus.storage.replication.factor = 1\nconfig.storage.replication.factor = 1\n\
              sync.topic.acls.enabled = false\n";
    }
    c
}

fn measure(
    who: Who,
    root: &Path,
    out: &Path,
    east: &str,
    west: &str,
    topics: &[String],
    tag: &str,
) -> anyhow::Result<Figures> {
    let path = out.join(format!("{tag}.properties"));
    std::fs::write(&path, config(who, east, west, topics)).context("config file")?;
    let log = std::fs::File::create(out.join(format!("{tag}.log"))).context("log file")?;
    let started = Instant::now();
    let child = Running(match who {
        Who::Strait => spawn::strait(&root.join("target/release/strait"), &path, log)?.0,
        Who::Mm2 => spawn::mm2(root, &path, log)?,
    });
    let pid = child.0.id();
    let remote: Vec<String> = topics.iter().enumerate().map(|(i, t)| format!("f{}.{t}", i + 1)).collect();
    wait_for_topics(west, &remote, Duration::from_secs(600))
        .with_context(|| format!("{} never created every remote topic; see {}", who.name(), out.display()))?;
    let ready_seconds = started.elapsed().as_secs_f64();
    std::thread::sleep(SETTLE);

    let (idle_cpu_percent, idle_rss_mib) = window(pid, None)?;
    let load = Load::start(east, topics)?;
    let (load_cpu_percent, load_rss_mib) = window(pid, Some(&load))?;
    drop(load);
    let threads = status_field(pid, "Threads:").unwrap_or(0.0) as u64;
    Ok(Figures {
        who,
        flows: topics.len(),
        threads,
        idle_rss_mib,
        idle_cpu_percent,
        load_rss_mib,
        load_cpu_percent,
        ready_seconds,
    })
}

/// CPU (percent of one core) over one window, and RSS at its end.
fn window(pid: u32, load: Option<&Load>) -> anyhow::Result<(f64, f64)> {
    let c0 = process::cpu_seconds(pid).context("the contender exited")?;
    let t0 = Instant::now();
    std::thread::sleep(WINDOW);
    let c1 = process::cpu_seconds(pid).context("the contender exited")?;
    if let Some(load) = load {
        if load.failed.load(Ordering::Relaxed) {
            bail!("the load producer failed");
        }
    }
    let rss = status_field(pid, "VmRSS:").context("reading RSS")? / 1024.0;
    Ok(((c1 - c0) / t0.elapsed().as_secs_f64() * 100.0, rss))
}

/// A numeric field of /proc/PID/status (kB for sizes).
fn status_field(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find(|l| l.starts_with(field))?.split_whitespace().nth(1)?.parse().ok()
}

fn wait_for_topics(west: &str, topics: &[String], timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        // A fresh client each time: librdkafka remembers a topic it found missing.
        let c: BaseConsumer = ClientConfig::new().set("bootstrap.servers", west).create().context("metadata client")?;
        if let Ok(md) = c.fetch_metadata(None, Duration::from_secs(10)) {
            let present = |t: &String| {
                md.topics().iter().any(|m| m.name() == t && m.error().is_none() && !m.partitions().is_empty())
            };
            if topics.iter().all(present) {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    bail!("not within {} s", timeout.as_secs())
}

/// Kills the contender when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `LOAD_RATE` records a second round-robin over the topics, until dropped.
struct Load {
    stop: Arc<AtomicBool>,
    failed: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(east: &str, topics: &[String]) -> anyhow::Result<Self> {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", east)
            .set("linger.ms", "5")
            .create()
            .context("load producer")?;
        let (stop, failed) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let (stop_flag, failed_flag, topics) = (stop.clone(), failed.clone(), topics.to_vec());
        let thread = std::thread::spawn(move || {
            let value = vec![b'x'; VALUE];
            let started = Instant::now();
            let mut sent = 0u64;
            while !stop_flag.load(Ordering::Relaxed) {
                let due = (started.elapsed().as_secs_f64() * LOAD_RATE as f64) as u64;
                while sent < due {
                    let topic = &topics[sent as usize % topics.len()];
                    if producer.send(BaseRecord::<(), [u8]>::to(topic).payload(&value[..])).is_err() {
                        failed_flag.store(true, Ordering::Relaxed);
                    }
                    sent += 1;
                }
                producer.poll(Duration::from_millis(10));
            }
            let _ = producer.flush(Duration::from_secs(10));
        });
        Ok(Self { stop, failed, thread: Some(thread) })
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn print_table(all: &[Figures], counts: &[usize]) {
    println!("| contender | flows | ready s | threads | idle RSS MiB | idle CPU % of a core | RSS under load MiB | CPU under load % |");
    println!("|---|---|---|---|---|---|---|---|");
    for f in all {
        println!("{}", f.row());
    }
    let (Some(&low), Some(&high)) = (counts.iter().min(), counts.iter().max()) else {
        return;
    };
    if high == low {
        return;
    }
    println!("\nPer flow added ({low} → {high} flows):\n");
    println!("| contender | threads | idle RSS MiB | idle CPU % of a core |");
    println!("|---|---|---|---|");
    for who in [Who::Strait, Who::Mm2] {
        let at = |n: usize| all.iter().find(|f| f.who == who && f.flows == n);
        if let (Some(a), Some(b)) = (at(low), at(high)) {
            let per = (high - low) as f64;
            println!(
                "| {} | {:.1} | {:.1} | {:.3} |",
                who.name(),
                (b.threads as f64 - a.threads as f64) / per,
                (b.idle_rss_mib - a.idle_rss_mib) / per,
                (b.idle_cpu_percent - a.idle_cpu_percent) / per
            );
        }
    }
}
