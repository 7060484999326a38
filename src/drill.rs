//! `strait drill`: the command line around [`strait_core::operator::drill`], its table and its
//! report files.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use strait_core::config::Config;
use strait_core::operator::drill::{drill_flow, DrillOptions, DrillReport};

/// The options as typed.
#[derive(clap::Args)]
pub struct DrillArgs {
    /// The MM2 properties file.
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
    /// The flow to drill, as `source->target`.
    #[arg(long, value_name = "SOURCE->TARGET")]
    pub flow: String,
    /// The canary topic on the source (created if missing); the flow's topic filters must pass it.
    #[arg(long, value_name = "TOPIC", default_value = "strait-drill")]
    pub canary_topic: String,
    /// Canary records written per partition; the canary group stops half-way.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub records: i64,
    /// How long each step may wait (replication of the canary, reading it on the target).
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    pub timeout_seconds: u64,
    /// Also write the report here as JSON, and the table beside it (FILE.txt).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

fn secs(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"))
}

/// The drill's report as a table.
pub fn table(r: &DrillReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "drill {}: canary topic {}, group {}", r.flow, r.canary_topic, r.canary_group);
    let _ = writeln!(
        out,
        "RPO at the decision: {} record(s) not on the target, the oldest written {} s before",
        r.rpo_records,
        secs(r.rpo_seconds)
    );
    let _ = writeln!(out, "{:<40} {:>9} {:>10} {:>12}", "source topic", "partition", "records", "oldest s");
    for row in &r.rpo {
        let _ = writeln!(out, "{:<40} {:>9} {:>10} {:>12}", row.topic, row.partition, row.records, secs(row.seconds));
    }
    let _ = writeln!(
        out,
        "RTO: {} s from the decision to the first record read on the target (positions committed there after {:.2} s)",
        secs(r.rto_seconds),
        r.failed_over_seconds
    );
    let _ = writeln!(
        out,
        "{:>9} {:>11} {:>11} {:>9} {:>6} {:>8} {:>11}  resumed with the next record",
        "partition", "stopped at", "resumed at", "expected", "read", "skipped", "read twice"
    );
    for c in &r.canary {
        let x = &c.resumed;
        let _ = writeln!(
            out,
            "{:>9} {:>11} {:>11} {:>9} {:>6} {:>8} {:>11}  {}",
            c.partition,
            c.stopped_at,
            c.resumed_at.map_or_else(|| "-".into(), |o| o.to_string()),
            x.expected,
            x.read,
            x.skipped,
            x.read_twice,
            if x.first_is_next { "yes" } else { "NO" }
        );
    }
    let _ = write!(out, "verification of the drill's window: {}", crate::verify::table(&r.verification));
    let _ = writeln!(
        out,
        "{}",
        if r.passed {
            "PASSED: the canary group failed over skipping nothing and reading nothing twice, and the copy verifies clean"
        } else {
            "FAILED: see the rows above"
        }
    );
    out
}

/// Runs `strait drill`; `Ok(false)` when the drill failed its checks.
pub fn drill(args: DrillArgs, config: &Config) -> anyhow::Result<bool> {
    let (from, to) = crate::moves::flow_ends(&args.flow)?;
    anyhow::ensure!(args.records >= 2, "--records {}: give at least 2, the group stops half-way", args.records);
    let options = DrillOptions {
        canary_topic: args.canary_topic.clone(),
        records: args.records,
        timeout: Duration::from_secs(args.timeout_seconds),
        ..DrillOptions::default()
    };
    let report = drill_flow(config, from, to, &options).with_context(|| format!("drilling flow {from}->{to}"))?;
    let text = table(&report);
    print!("{text}");
    if let Some(path) = &args.report {
        let json = serde_json::to_string_pretty(&report).context("writing the report")?;
        std::fs::write(path, json).with_context(|| format!("writing the report to {}", path.display()))?;
        let mut txt = path.clone().into_os_string();
        txt.push(".txt");
        std::fs::write(&txt, &text).with_context(|| format!("writing the table to {}", txt.to_string_lossy()))?;
    }
    Ok(report.passed)
}
