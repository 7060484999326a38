//! `strait-bench`: strait, real MirrorMaker 2 and the raw copy ceiling on the same clusters and
//! the same data, in one run. Each contender drains the same pre-loaded backlog into a fresh
//! topic, per record size; then each follows a steady load for latency, at half the ceiling's
//! drain rate or at a fixed rate (`--rate`; `--steady-only` skips the drains). Writes a JSON file, an
//! SVG chart and a Markdown section (appended to benches/RESULTS.md unless `--quick`).
//!
//! Run from the repository root after `cargo build --release --workspace`; `benches/vs-mm2.sh`
//! does both.

mod contenders;
mod kafka;
mod process;
mod report;
mod run;
mod spawn;

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Parser;

use contenders::Contender;
use report::{Results, Round, SizeResult};

#[derive(Parser)]
#[command(
    name = "strait-bench",
    about = "strait vs MirrorMaker 2 vs a raw copy loop, side by side",
    args_override_self = true
)]
struct Args {
    /// Small backlogs and short steady runs (a few minutes): a smoke test, not a measurement.
    #[arg(long)]
    quick: bool,
    /// Partitions of every topic.
    #[arg(long, default_value_t = 6)]
    partitions: i32,
    /// Where the JSON file and the chart go.
    #[arg(long, default_value = "benches/results")]
    results: PathBuf,
    /// The Markdown file the table is appended to (full runs only).
    #[arg(long, default_value = "benches/RESULTS.md")]
    markdown: PathBuf,
    /// Run only these contenders (for profiling one of them); nothing is appended to the
    /// Markdown file unless all three run.
    #[arg(long, value_delimiter = ',', value_enum)]
    only: Vec<Contender>,
    /// Run only these record sizes in bytes (100, 1024, 10240); nothing is appended to the
    /// Markdown file unless all run.
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Skip the steady (latency) runs.
    #[arg(long)]
    drain_only: bool,
    /// Fixed-rate mode: the steady runs produce this many records a second, whatever the
    /// ceiling drains (by default half of the ceiling's drain rate).
    #[arg(long)]
    rate: Option<u64>,
    /// Seconds of measured steady load, after a 5 s warm-up (default 20, 5 with `--quick`).
    #[arg(long)]
    steady_seconds: Option<u64>,
    /// Skip the drains: only the steady runs, at `--rate` (latency where the machine is not
    /// saturated; `benches/latency.sh`).
    #[arg(long, requires = "rate", conflicts_with = "drain_only")]
    steady_only: bool,
    /// The compression codec of every contender's target producer: the same work for all
    /// three (strait's default is lz4; MM2's, Connect's, is none).
    #[arg(long, default_value = "lz4")]
    codec: String,
    /// Steady runs per contender and size, taken in turns (ceiling, strait, mm2, ceiling, ...)
    /// so that a slow spell of the shared machine falls on all of them. The main table shows
    /// each contender's run with the median p99; a table per round shows every run.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// A line added to strait's config, for trying a setting (e.g.
    /// `--strait-extra 'us-west.producer.linger.ms = 1'`); may be given several times. The
    /// results' command line names it.
    #[arg(long = "strait-extra")]
    strait_extra: Vec<String>,
    /// Put one cluster across a link with this round trip (ms, a tenth of it as jitter): a
    /// fault proxy (`scripts/wan.sh`) in front of a cluster of its own, which every contender
    /// crosses alike. 0: the loopback stand.
    #[arg(long, default_value_t = 0)]
    rtt: u32,
    /// Records in each size's backlog, instead of the defaults (10M at 100 B, 3M at 1 KiB, 300k
    /// at 10 KiB): shorter drains, for runs repeated in turns (`benches/wan.sh`).
    #[arg(long)]
    backlog: Option<u64>,
    /// What the backlog's values hold: `random` letters, which no codec the contenders use
    /// shrinks, or `json` documents, which shrink several times and are loaded lz4-compressed.
    #[arg(long, value_enum, default_value = "random")]
    data: kafka::Data,
    /// Which cluster is across the link: `target` (the contenders produce remotely) or `source`
    /// (they consume remotely).
    #[arg(long, value_enum, default_value = "target")]
    across: kafka::Across,
}

/// The command that reproduces this run: the script and the arguments given, less where the
/// files went.
fn command_line() -> String {
    let mut words = vec!["benches/vs-mm2.sh".to_string()];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--results" | "--markdown" => drop(args.next()),
            _ if a.starts_with("--results=") || a.starts_with("--markdown=") => {}
            _ => words.push(a),
        }
    }
    words.join(" ")
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let root = std::env::current_dir().context("current directory")?;
    if !root.join("scripts/kafka.sh").exists() {
        bail!("run strait-bench from the repository root (scripts/kafka.sh not found in {})", root.display());
    }
    let mode = if args.quick { "quick" } else { "full" };
    let logs = std::env::temp_dir().join(format!("strait-bench-{}", std::process::id()));
    std::fs::create_dir_all(&logs).context("log directory")?;
    std::fs::create_dir_all(&args.results).context("results directory")?;
    eprintln!("strait-bench ({mode}): contender logs in {}", logs.display());

    let link = (args.rtt > 0).then_some(kafka::Link { across: args.across, rtt_ms: args.rtt });
    let mut stand = kafka::Stand::start(&root, link)?;
    stand.codec = args.codec.clone();
    stand.data = args.data;
    stand.across = args.across;
    stand.strait_extra = args.strait_extra.iter().map(|line| format!("{line}\n")).collect();
    // (record size, backlog records) and the steady run's length.
    let (sizes, default_seconds): (&[(usize, u64)], u64) = if args.quick {
        (&[(100, 100_000), (1024, 30_000), (10240, 3_000)], 5)
    } else {
        (&[(100, 10_000_000), (1024, 3_000_000), (10240, 300_000)], 20)
    };
    let steady_seconds = args.steady_seconds.unwrap_or(default_seconds);
    let all = [Contender::Ceiling, Contender::Strait, Contender::Mm2];
    // `--only` runs its contenders in the order given, so repeated runs can take turns.
    let contenders: Vec<Contender> = if args.only.is_empty() { all.to_vec() } else { args.only.clone() };
    let sizes: Vec<(usize, u64)> = sizes
        .iter()
        .map(|&(s, n)| (s, args.backlog.unwrap_or(n)))
        .filter(|(s, _)| args.sizes.is_empty() || args.sizes.contains(s))
        .collect();
    // A partial run is an experiment, not a result to keep; a fixed-rate latency run keeps
    // whatever sizes it was asked for.
    let partial = contenders.len() < all.len() || (!args.steady_only && (sizes.len() < 3 || args.drain_only));
    // In every name this run creates, so its topics can be found and deleted afterwards.
    let tag = format!("sb{}", std::process::id());
    let mut results = Vec::new();
    for &(size, records) in &sizes {
        let mut drains = Vec::new();
        if !args.steady_only {
            let backlog = format!("backlog-{size}-{tag}");
            stand.create_topic(true, &backlog, args.partitions)?;
            eprintln!("loading {records} records of {size} B into {backlog}");
            stand.preload(&backlog, records, size)?;
            for &c in &contenders {
                let d = run::drain(
                    c,
                    &stand,
                    &backlog,
                    args.partitions,
                    records,
                    size,
                    &format!("{}-drain-{size}-{tag}", c.name()),
                    &logs,
                )?;
                eprintln!(
                    "  {:<8} drain: {:>9.0} records/s {:>7.1} MB/s, {:.1} CPU s, peak RSS {:.0} MiB, {:.0} B to the target per record",
                    c.name(),
                    d.records_per_second,
                    d.mb_per_second,
                    d.cpu_seconds,
                    d.peak_rss_mib,
                    d.target_bytes_per_record
                );
                drains.push((c, d));
            }
        }
        let ceiling =
            drains.iter().find(|(c, _)| *c == Contender::Ceiling).map_or(1000.0, |(_, d)| d.records_per_second);
        let rate = args.rate.unwrap_or(((ceiling * 0.5) as u64).max(100));
        eprintln!(
            "  steady load: {rate} records/s of {size} B for {steady_seconds} s after a {} s warm-up",
            run::WARM_UP_SECONDS
        );
        let mut steady = Vec::new();
        let rounds = if args.drain_only { 0 } else { args.repeat };
        for round in 1..=rounds {
            for &c in &contenders {
                let s = run::steady(
                    c,
                    &stand,
                    args.partitions,
                    size,
                    rate,
                    steady_seconds,
                    &format!("{}-steady-{size}-r{round}-{tag}", c.name()),
                    &logs,
                )?;
                eprintln!(
                    "  {:<8} steady at {rate}/s (round {round}): p50 {:.0} ms, p99 {:.0} ms, p99.9 {:.0} ms",
                    c.name(),
                    s.p50_ms,
                    s.p99_ms,
                    s.p999_ms
                );
                if let Some(i) = s.inside_ms {
                    eprintln!(
                        "           its own histograms: fetched p50 {:.1} / p99 {:.1} ms, acknowledged p50 {:.1} / p99 {:.1} ms after the source timestamp",
                        i.fetched_p50, i.fetched_p99, i.acked_p50, i.acked_p99
                    );
                }
                steady.push((c, Round { round, steady: s }));
            }
        }
        results.push(SizeResult { size, records, drains, steady });
        // Every name of this run carries the tag: backlog, copies, MM2's and strait's topics.
        stand.delete_topics(&tag);
    }

    let date = String::from_utf8_lossy(
        &std::process::Command::new("date").args(["-u", "+%Y-%m-%d"]).output().context("date")?.stdout,
    )
    .trim()
    .to_string();
    // Several runs a day must not overwrite each other's files.
    let time = String::from_utf8_lossy(
        &std::process::Command::new("date").args(["-u", "+%H%M"]).output().context("date")?.stdout,
    )
    .trim()
    .to_string();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    let results = Results {
        date: date.clone(),
        machine: format!("{cores} cores, {memory_gib:.0} GiB"),
        link,
        command: command_line(),
        steady_seconds,
        rate_fixed: args.rate.is_some(),
        partitions: args.partitions,
        settings: contenders
            .iter()
            .map(|c| (*c, c.settings(args.partitions, &args.codec, &args.strait_extra, args.across)))
            .collect(),
        sizes: results,
    };
    let kind = if args.steady_only { "latency" } else { "vs-mm2" };
    let stem = format!("{kind}-{date}-{time}-{}", if partial && !args.quick { "partial" } else { mode });
    let json = args.results.join(format!("{stem}.json"));
    let svg = args.results.join(format!("{stem}.svg"));
    results.write_json(&json)?;
    results.chart(&svg)?;
    let chart_link = svg.strip_prefix("benches").unwrap_or(&svg).display().to_string();
    let md = results.markdown(&chart_link);
    println!("{md}");
    if !args.quick && !partial {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&args.markdown)
            .with_context(|| format!("opening {}", args.markdown.display()))?;
        f.write_all(md.as_bytes())?;
    }
    eprintln!("wrote {} and {}", json.display(), svg.display());
    Ok(())
}
