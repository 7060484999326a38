//! `strait verify`: the command line around [`strait_core::operator::verify`], and its table.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::Context;
use strait_core::clock::now_millis;
use strait_core::config::Config;
use strait_core::operator::verify::{
    verify_flow, Bound, Findings, PartitionVerdict, Tally, VerifyOptions, VerifyReport,
};
use strait_core::operator::FlowView;

/// Exit status when the copy differs from the source (1 is kept for "could not verify").
pub const DIFFERS: i32 = 3;

/// The options as typed, before they are checked.
#[derive(clap::Args)]
pub struct VerifyArgs {
    /// The MM2 properties file.
    #[arg(short, long, value_name = "FILE")]
    pub config: std::path::PathBuf,
    /// The flow to verify, as `source->target`.
    #[arg(long, value_name = "SOURCE->TARGET")]
    pub flow: String,
    /// Only source topics matching this regular expression.
    #[arg(long, value_name = "REGEX")]
    pub topics: Option<String>,
    /// Start at this source offset in every partition.
    #[arg(long, value_name = "OFFSET", conflicts_with = "since")]
    pub from_offset: Option<i64>,
    /// Stop before this source offset in every partition.
    #[arg(long, value_name = "OFFSET", conflicts_with = "until")]
    pub to_offset: Option<i64>,
    /// Start at the first record written at or after TIME: milliseconds since the epoch, or a
    /// time ago such as `90s`, `15m`, `2h`, `1d`.
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Stop before the first record written at or after TIME (as --since).
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Read at most this many bytes per second from both clusters together.
    #[arg(long, value_name = "BYTES")]
    pub max_bytes_per_second: Option<u64>,
    /// Fail on duplicates in an at-least-once flow too (an exactly-once flow always does).
    #[arg(long)]
    pub fail_on_duplicates: bool,
    /// Print the report as one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Parses `--since`/`--until`: epoch milliseconds, or a span before now.
fn time(text: &str, now: i64) -> anyhow::Result<i64> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let seconds: i64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => 0,
    };
    match number.parse::<i64>() {
        Ok(n) if seconds > 0 => Ok(now - n * seconds * 1000),
        _ => anyhow::bail!(
            "`{text}` is not a time: give milliseconds since the epoch, or a span ago such as 15m, 2h or 1d"
        ),
    }
}

/// Runs `strait verify`; `Ok(false)` when the copy differs.
pub fn verify(args: VerifyArgs, config: &Config) -> anyhow::Result<bool> {
    let (from, to) = crate::moves::flow_ends(&args.flow)?;
    let now = now_millis();
    let options = VerifyOptions {
        topics: args.topics.as_deref().map(regex::Regex::new).transpose().with_context(|| {
            format!("--topics `{}` is not a regular expression", args.topics.as_deref().unwrap_or(""))
        })?,
        from: match (args.from_offset, &args.since) {
            (Some(o), _) => Some(Bound::Offset(o)),
            (None, Some(t)) => Some(Bound::Time(time(t, now).context("--since")?)),
            (None, None) => None,
        },
        until: match (args.to_offset, &args.until) {
            (Some(o), _) => Some(Bound::Offset(o)),
            (None, Some(t)) => Some(Bound::Time(time(t, now).context("--until")?)),
            (None, None) => None,
        },
        max_bytes_per_second: args.max_bytes_per_second,
        fail_on_duplicates: args.fail_on_duplicates,
    };
    let view = FlowView::load(config, from, to).with_context(|| format!("reading the state of flow {from}->{to}"))?;
    let started = Instant::now();
    let mut last = Instant::now();
    let report = verify_flow(&view, &options, |p| {
        // A long run says how far it is, on stderr so a script's JSON stays clean.
        if last.elapsed() >= Duration::from_secs(2) {
            last = Instant::now();
            eprintln!(
                "verify: {} of {} partitions, {} records and {:.1} MB read in {:.0}s",
                p.partitions_done,
                p.partitions,
                p.records,
                p.bytes as f64 / 1e6,
                started.elapsed().as_secs_f64()
            );
        }
    })
    .with_context(|| format!("verifying flow {from}->{to}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).context("writing the report")?);
    } else {
        print!("{}", table(&report));
    }
    Ok(report.clean)
}

fn first(t: &Tally) -> String {
    match (t.first_source, t.first_target) {
        (Some(s), Some(t)) => format!("source {s} / target {t}"),
        (Some(s), None) => format!("source {s}"),
        (None, Some(t)) => format!("target {t}"),
        (None, None) => "-".into(),
    }
}

/// The first kind of problem a partition has, with where it starts.
fn first_problem(f: &Findings) -> String {
    [
        ("missing", &f.missing),
        ("differs", &f.differs),
        ("out of order", &f.out_of_order),
        ("unexpected", &f.unexpected),
        ("duplicate", &f.duplicates),
    ]
    .iter()
    .find(|(_, t)| t.any())
    .map_or_else(String::new, |(what, t)| format!("{what} at {}", first(t)))
}

/// The report as a table, one row per partition, and the summary line.
pub fn table(r: &VerifyReport) -> String {
    let mut out = String::new();
    let mode = if r.exactly_once { "exactly-once" } else { "at-least-once" };
    let _ = writeln!(
        out,
        "flow {} ({mode}): {} partition(s), {:.1} MB read in {:.1}s",
        r.flow,
        r.partitions.len(),
        r.bytes_read as f64 / 1e6,
        r.seconds
    );
    let _ = writeln!(
        out,
        "{:<28} {:>4} {:>21} {:>21} {:>9} {:>8} {:>5} {:>6} {:>8} {:>6}  first problem",
        "topic", "part", "source offsets", "target offsets", "matched", "missing", "dups", "order", "differs", "unexp"
    );
    for p in &r.partitions {
        row(&mut out, p);
    }
    let t = &r.total;
    let verdict = if r.clean { "CLEAN" } else { "DIFFERS" };
    let dups = if r.duplicates_fail { "duplicate(s)" } else { "duplicate(s) (at-least-once: not a failure)" };
    let _ = writeln!(
        out,
        "{verdict}: {} of {} source record(s) on the target once, in order and unchanged; {} missing, {} out of order, {} differ, {} unexpected, {} {dups}; {} compacted away on the source, {} on the target",
        t.matched,
        t.expected,
        t.missing.records,
        t.out_of_order.records,
        t.differs.records,
        t.unexpected.records,
        t.duplicates.records,
        t.compacted_on_source,
        t.compacted_on_target
    );
    out
}

fn row(out: &mut String, p: &PartitionVerdict) {
    if let Some(why) = &p.skipped {
        let _ = writeln!(out, "{:<28} {:>4}  not compared: {why}", p.topic, p.partition);
        return;
    }
    let f = &p.findings;
    let _ = writeln!(
        out,
        "{:<28} {:>4} {:>21} {:>21} {:>9} {:>8} {:>5} {:>6} {:>8} {:>6}  {}",
        p.topic,
        p.partition,
        format!("{}..{}", p.source_range.0, p.source_range.1),
        format!("{}..{}", p.target_range.0, p.target_range.1),
        f.matched,
        f.missing.records,
        f.duplicates.records,
        f.out_of_order.records,
        f.differs.records,
        f.unexpected.records,
        first_problem(f)
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_are_epoch_milliseconds_or_a_span_ago() {
        assert_eq!(super::time("1700000000000", 5).ok(), Some(1_700_000_000_000));
        assert_eq!(super::time("15m", 1_000_000).ok(), Some(100_000));
        assert_eq!(super::time("2h", 8_000_000).ok(), Some(800_000));
        assert!(super::time("yesterday", 0).is_err());
        assert!(super::time("5w", 0).is_err());
    }
}
