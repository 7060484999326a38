//! What an operator pays per flow: strait and real MirrorMaker 2 run the same config of N flows
//! (source aliases `f1`..`fN`, all on us-east, each replicating a topic of its own to us-west),
//! for each N asked; once every remote topic exists and a settling pause passed, each process's
//! threads, RSS and CPU are read over an idle window and again under a moderate load spread over
//! the N topics. Prints a Markdown table, and the cost of each flow added.
//!
//! With `hub` instead of counts, both run one hub-and-spoke config instead: us-west is the hub,
//! four clusters of their own are the spokes, each spoke's `orders` fans in to the hub and the
//! hub's `config` fans out to every spoke (8 flows).
//!
//! Usage: strait-flows EAST WEST COUNTS (e.g. 1,20)
//!        strait-flows EAST WEST hub SPOKE1,SPOKE2,SPOKE3,SPOKE4 (bootstrap servers)
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

/// What one run replicates: the config both contenders run, the remote topics that show every
/// flow is up, and the topics the load goes to, each with its cluster's bootstrap servers.
struct Layout {
    flows: usize,
    config: String,
    remote: Vec<(String, String)>,
    load: Vec<(String, String)>,
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
    let root = std::env::current_dir().context("current directory")?;
    let out = std::env::temp_dir().join(format!("strait-flows-{}", std::process::id()));
    std::fs::create_dir_all(&out).context("log directory")?;
    eprintln!("strait-flows: logs and configs in {}", out.display());
    // STRAIT_FLOWS_ONLY=strait (or mm2) runs one contender, for looking into one.
    let only = std::env::var("STRAIT_FLOWS_ONLY").ok();
    let contenders = || [Who::Strait, Who::Mm2].into_iter().filter(|w| only.as_deref().is_none_or(|o| o == w.name()));
    if let [_, west, mode, spokes] = args.as_slice() {
        if mode != "hub" {
            bail!("usage: strait-flows EAST WEST hub SPOKE1,SPOKE2,SPOKE3,SPOKE4");
        }
        let spokes: Vec<String> = spokes.split(',').map(str::to_string).collect();
        let mut all = Vec::new();
        for who in contenders() {
            let tag = format!("hub{}{}", std::process::id(), who.name());
            let layout = hub_and_spokes(who, west, &spokes, &tag)?;
            let f = measure(who, &root, &out, &layout, &tag)?;
            eprintln!("{}", f.row());
            all.push(f);
        }
        print_table(&all, &[8]);
        return Ok(());
    }
    let [east, west, counts] = args.as_slice() else {
        bail!("usage: strait-flows EAST WEST COUNTS (e.g. 1,20), or strait-flows EAST WEST hub SPOKE1,SPOKE2,SPOKE3,SPOKE4");
    };
    let counts: Vec<usize> = counts
        .split(',')
        .map(|c| c.trim().parse().context("COUNTS: numbers separated by commas"))
        .collect::<Result<_, _>>()?;
    let mut all = Vec::new();
    for &n in &counts {
        for who in contenders() {
            // Fresh topics per run: each contender starts from empty topics and its own names.
            let tag = format!("fl{}{}{n}", std::process::id(), who.name());
            let topics: Vec<String> = (1..=n).map(|i| format!("flows-{tag}-{i}")).collect();
            admin::create_topics(east, &topics, PARTITIONS)?;
            let layout = Layout {
                flows: n,
                config: config(who, east, west, &topics),
                remote: topics.iter().enumerate().map(|(i, t)| (west.clone(), format!("f{}.{t}", i + 1))).collect(),
                load: topics.iter().map(|t| (east.clone(), t.clone())).collect(),
            };
            let f = measure(who, &root, &out, &layout, &tag)?;
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
    if who == Who::Strait {
        c += &strait_extra(&aliases);
    }
    if who == Who::Mm2 {
        // MM2 builds a Connect herder for every ordered pair of clusters whose heartbeats are on,
        // enabled or not: 420 for 21 aliases, which it never finished starting here in 10
        // minutes. Heartbeats only where a flow runs is what an MM2 operator writes.
        c += "emit.heartbeats.enabled = false\n";
        for alias in &aliases {
            c += &format!("{alias}->us-west.emit.heartbeats.enabled = true\n");
        }
        c += MM2_SINGLE_BROKER;
    }
    c
}

/// Lines of `STRAIT_FLOWS_EXTRA` added to strait's config of the counted flows, for trying a
/// setting: a line with `@SOURCE@` is written once per source alias with the alias in its
/// place (`@SOURCE@.consumer.fetch.min.bytes = 16384`), any other line once.
fn strait_extra(aliases: &[String]) -> String {
    let extra = std::env::var("STRAIT_FLOWS_EXTRA").unwrap_or_default();
    let mut out = String::new();
    for line in extra.lines() {
        if line.contains("@SOURCE@") {
            aliases.iter().for_each(|a| out += &format!("{}\n", line.replace("@SOURCE@", a)));
        } else {
            out += &format!("{line}\n");
        }
    }
    out
}

/// MM2's own topics default to 3 replicas; the stand's us-west and the spokes have one broker.
const MM2_SINGLE_BROKER: &str = "checkpoints.topic.replication.factor = 1\nheartbeats.topic.replication.factor = 1\n\
    offset-syncs.topic.replication.factor = 1\noffset.storage.replication.factor = 1\nstatus.storage.replication.factor = 1\n\
    config.storage.replication.factor = 1\nsync.topic.acls.enabled = false\n";

/// Hub `hub` (us-west) and spokes `s1`..`s4`: `sI->hub` replicates the spoke's orders topic,
/// `hub->sI` the hub's config topic; the topics are made here, `tag` keeps them fresh.
fn hub_and_spokes(who: Who, hub: &str, spokes: &[String], tag: &str) -> anyhow::Result<Layout> {
    let (orders, config_topic) = (format!("orders-{tag}"), format!("config-{tag}"));
    admin::create_topics(hub, std::slice::from_ref(&config_topic), PARTITIONS)?;
    let aliases: Vec<String> = (1..=spokes.len()).map(|i| format!("s{i}")).collect();
    let mut c =
        format!("clusters = hub, {}\nhub.bootstrap.servers = {hub}\nreplication.factor = 1\n", aliases.join(", "));
    let mut layout = Layout { flows: 2 * spokes.len(), config: String::new(), remote: Vec::new(), load: Vec::new() };
    for (alias, spoke) in aliases.iter().zip(spokes) {
        admin::create_topics(spoke, std::slice::from_ref(&orders), PARTITIONS)?;
        c += &format!(
            "{alias}.bootstrap.servers = {spoke}\n{alias}->hub.enabled = true\n{alias}->hub.topics = {orders}\n\
             hub->{alias}.enabled = true\nhub->{alias}.topics = {config_topic}\n"
        );
        layout.remote.push((hub.to_string(), format!("{alias}.{orders}")));
        layout.remote.push((spoke.clone(), format!("hub.{config_topic}")));
        layout.load.push((spoke.clone(), orders.clone()));
    }
    layout.load.push((hub.to_string(), config_topic));
    if who == Who::Mm2 {
        c += MM2_SINGLE_BROKER;
    }
    layout.config = c;
    Ok(layout)
}

fn measure(who: Who, root: &Path, out: &Path, layout: &Layout, tag: &str) -> anyhow::Result<Figures> {
    let path = out.join(format!("{tag}.properties"));
    std::fs::write(&path, &layout.config).context("config file")?;
    let log = std::fs::File::create(out.join(format!("{tag}.log"))).context("log file")?;
    let started = Instant::now();
    let child = spawn::KillOnDrop(match who {
        Who::Strait => spawn::strait(&root.join("target/release/strait"), &path, log)?.0,
        Who::Mm2 => spawn::mm2(root, &path, log)?,
    });
    let pid = child.0.id();
    for (bootstrap, topic) in &layout.remote {
        wait_for_topics(bootstrap, std::slice::from_ref(topic), Duration::from_secs(600))
            .with_context(|| format!("{} never created {topic} on {bootstrap}; see {}", who.name(), out.display()))?;
    }
    let ready_seconds = started.elapsed().as_secs_f64();
    std::thread::sleep(SETTLE);

    let (idle_cpu_percent, idle_rss_mib) = window(pid, None)?;
    let load = Load::start(&layout.load)?;
    let (load_cpu_percent, load_rss_mib) = window(pid, Some(&load))?;
    drop(load);
    let threads = status_field(pid, "Threads:").unwrap_or(0.0) as u64;
    Ok(Figures {
        who,
        flows: layout.flows,
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

/// `LOAD_RATE` records a second round-robin over the topics (each on its cluster), until dropped.
struct Load {
    stop: Arc<AtomicBool>,
    failed: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(topics: &[(String, String)]) -> anyhow::Result<Self> {
        // One producer per cluster; each topic names its producer by index.
        let mut bootstraps: Vec<&str> = topics.iter().map(|(b, _)| b.as_str()).collect();
        bootstraps.sort_unstable();
        bootstraps.dedup();
        let producers: Vec<BaseProducer> = bootstraps
            .iter()
            .map(|b| ClientConfig::new().set("bootstrap.servers", *b).set("linger.ms", "5").create())
            .collect::<Result<_, _>>()
            .context("load producer")?;
        let topics: Vec<(usize, String)> =
            topics.iter().map(|(b, t)| (bootstraps.iter().position(|x| x == b).unwrap_or(0), t.clone())).collect();
        let (stop, failed) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let (stop_flag, failed_flag) = (stop.clone(), failed.clone());
        let thread = std::thread::spawn(move || {
            let value = vec![b'x'; VALUE];
            let started = Instant::now();
            let mut sent = 0u64;
            while !stop_flag.load(Ordering::Relaxed) {
                let due = (started.elapsed().as_secs_f64() * LOAD_RATE as f64) as u64;
                while sent < due {
                    let (p, topic) = &topics[sent as usize % topics.len()];
                    if producers[*p].send(BaseRecord::<(), [u8]>::to(topic).payload(&value[..])).is_err() {
                        failed_flag.store(true, Ordering::Relaxed);
                    }
                    sent += 1;
                }
                for p in &producers {
                    p.poll(Duration::from_millis(10) / producers.len() as u32);
                }
            }
            for p in &producers {
                let _ = p.flush(Duration::from_secs(10));
            }
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
