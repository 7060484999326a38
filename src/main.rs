//! `strait`: replicate Kafka topics between clusters from an MM2 `mm2.properties`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use clap::{Parser, Subcommand};
use strait_core::config::Config;
use strait_core::flows::{RunOptions, Signals};
use tracing_subscriber::fmt::writer::MakeWriterExt;

mod drill;
mod moves;
mod operator;
mod policy_test;
mod verify;

#[derive(Parser)]
#[command(name = "strait", version, about = "Kafka cross-cluster replication, configured like MirrorMaker 2")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// `text` (default) or `json`: one JSON object per line with timestamp, level, target,
    /// message and the event's fields. Overrides STRAIT_LOG_FORMAT.
    #[arg(long, global = true, value_name = "FORMAT")]
    log_format: Option<LogFormat>,
}

/// How log lines are written to stderr.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines (colour on a terminal).
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Replicate every enabled flow of an mm2.properties until SIGINT/SIGTERM.
    Run {
        /// The MM2 properties file.
        #[arg(short, long, value_name = "FILE")]
        config: PathBuf,
        /// Where the Prometheus endpoint listens (overrides `strait.metrics.listen`).
        #[arg(long, value_name = "ADDR:PORT")]
        metrics_listen: Option<SocketAddr>,
        /// Stop every flow and exit non-zero at the first failure of any flow, instead of
        /// restarting or parking it while the others go on.
        #[arg(long)]
        fail_fast: bool,
        /// This process's static membership in every flow's group, unique per process (e.g.
        /// the pod name); overrides `strait.group.instance.id`. A restart under the same id gets
        /// its tasks back without moving anyone else's.
        #[arg(long, value_name = "ID")]
        instance_id: Option<String>,
    },
    /// Consumer-group offsets across clusters.
    Offsets {
        #[command(subcommand)]
        command: OffsetsCommand,
    },
    /// Show what failing a consumer group over to the other cluster costs (RPO) and where it
    /// would resume; with --apply, commit those positions there.
    ///
    /// With --flow instead of --group/--from/--to: every group of the flow at once, in one plan.
    Failover {
        /// The MM2 properties file.
        #[arg(short, long, value_name = "FILE")]
        config: PathBuf,
        /// Every group the flow `source->target` checkpoints (with the source down: every
        /// group it wrote checkpoints for).
        #[arg(long, value_name = "SOURCE->TARGET", conflicts_with_all = ["group", "from", "to"])]
        flow: Option<String>,
        /// The consumer group.
        #[arg(long, required_unless_present = "flow")]
        group: Option<String>,
        /// The cluster the group consumed from.
        #[arg(long, value_name = "ALIAS", required_unless_present = "flow")]
        from: Option<String>,
        /// The cluster it moves to.
        #[arg(long, value_name = "ALIAS", required_unless_present = "flow")]
        to: Option<String>,
        /// Commit the positions on the target (only for groups with no members there).
        #[arg(long)]
        apply: bool,
    },
    /// Prepare the way home after a failover of the flow `source->target`: check that the
    /// reverse flow runs and what of the target it has not copied home yet, and plan (with
    /// --apply, commit) every group's positions back on the source.
    Failback {
        /// The MM2 properties file.
        #[arg(short, long, value_name = "FILE")]
        config: PathBuf,
        /// The flow that was failed over, `source->target`.
        #[arg(long, value_name = "SOURCE->TARGET")]
        flow: String,
        /// Commit the positions on the source (only for groups with no members there).
        #[arg(long)]
        apply: bool,
    },
    /// Per flow: its state in the running process, heartbeat age and replication lag in
    /// records and seconds.
    Status {
        /// The MM2 properties file.
        #[arg(short, long, value_name = "FILE")]
        config: PathBuf,
        /// The running process's metrics endpoint (default: `strait.metrics.listen`).
        #[arg(long, value_name = "ADDR:PORT")]
        metrics: Option<SocketAddr>,
    },
    /// Prove a flow's copy: every source record on the target once, in order, unchanged, read
    /// through the flow's stored offset mapping. Exits 3 when the copy differs.
    Verify(verify::VerifyArgs),
    /// Rehearse a failover on a live pair with strait's own canary topic and group: the RPO of
    /// every partition, the RTO, and a canary group that must resume skipping nothing and
    /// reading nothing twice. Exits 3 when the drill fails its checks.
    Drill(drill::DrillArgs),
    /// Policy components.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Check an mm2.properties: print the flows strait would run and every ignored key.
    Validate {
        /// The MM2 properties file.
        #[arg(short, long, value_name = "FILE")]
        config: PathBuf,
    },
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Run a component's hooks without Kafka, on records from a file, and print what each
    /// hook answered (with the same engine, limits and properties as `strait run`).
    Test(policy_test::PolicyTestArgs),
}

#[derive(Subcommand)]
enum OffsetsCommand {
    /// Print where a group can resume on the other cluster (MM2's RemoteClusterUtils.translateOffsets).
    Translate {
        #[command(flatten)]
        group: GroupMove,
    },
}

/// A consumer group moving from one cluster to another.
#[derive(clap::Args)]
struct GroupMove {
    /// The MM2 properties file.
    #[arg(short, long, value_name = "FILE")]
    config: PathBuf,
    /// The consumer group.
    #[arg(long)]
    group: String,
    /// The cluster the group consumed from.
    #[arg(long, value_name = "ALIAS")]
    from: String,
    /// The cluster it moves to.
    #[arg(long, value_name = "ALIAS")]
    to: String,
}

/// Set once the process reports why it stops: from then on only this binary's own events are
/// written, so that report stays the last line whatever the engine's threads still log.
static REPORTING_EXIT: AtomicBool = AtomicBool::new(false);

fn main() {
    let cli = Cli::parse();
    let format = match (cli.log_format, std::env::var("STRAIT_LOG_FORMAT").ok().as_deref()) {
        (Some(f), _) => f,
        (None, Some("json")) => LogFormat::Json,
        (None, Some("text") | Some("") | None) => LogFormat::Text,
        (None, Some(other)) => {
            eprintln!("error: STRAIT_LOG_FORMAT is `{other}`; use `text` or `json`");
            std::process::exit(2);
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("STRAIT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let stderr = std::io::stderr.with_filter(|meta: &tracing::Metadata<'_>| {
        !REPORTING_EXIT.load(Ordering::Relaxed) || meta.target() == "strait"
    });
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(stderr);
    match format {
        LogFormat::Json => logs.json().flatten_event(true).with_current_span(false).with_span_list(false).init(),
        LogFormat::Text => logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init(),
    }
    if let Err(e) = dispatch(cli) {
        // The last line says why, in the format the log pipeline reads.
        REPORTING_EXIT.store(true, Ordering::Relaxed);
        match format {
            LogFormat::Json => tracing::error!(error = %format!("{e:#}"), "strait stopped"),
            LogFormat::Text => eprintln!("error: {e:#}"),
        }
        std::process::exit(1);
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run { config, metrics_listen, fail_fast, instance_id } => {
            run(&config, metrics_listen, fail_fast, instance_id)
        }
        Command::Validate { config } => validate(&config),
        Command::Offsets { command: OffsetsCommand::Translate { group: g } } => {
            operator::translate(&load(&g.config)?, &g.group, &g.from, &g.to)
        }
        Command::Failover { config, flow: Some(flow), apply, .. } => {
            moves::failover_flow(&load(&config)?, &flow, apply)
        }
        Command::Failover { config, flow: None, group, from, to, apply } => {
            let (Some(group), Some(from), Some(to)) = (group, from, to) else {
                anyhow::bail!("give --flow source->target, or --group, --from and --to")
            };
            operator::failover(&load(&config)?, &group, &from, &to, apply)
        }
        Command::Failback { config, flow, apply } => moves::failback(&load(&config)?, &flow, apply),
        Command::Policy { command: PolicyCommand::Test(args) } => policy_test::policy_test(args),
        Command::Drill(args) => {
            let config = load(&args.config)?;
            if !drill::drill(args, &config)? {
                std::process::exit(verify::DIFFERS);
            }
            Ok(())
        }
        Command::Verify(args) => {
            let config = load(&args.config)?;
            if !verify::verify(args, &config)? {
                std::process::exit(verify::DIFFERS);
            }
            Ok(())
        }
        Command::Status { config, metrics } => {
            let config = load(&config)?;
            let metrics = metrics.unwrap_or(config.metrics_listen);
            operator::status(&config, metrics)
        }
    }
}

fn load(path: &std::path::Path) -> anyhow::Result<Config> {
    let config = Config::from_file(path).with_context(|| format!("config {}", path.display()))?;
    for warning in &config.warnings {
        tracing::warn!("{}: {warning}", path.display());
    }
    Ok(config)
}

fn run(
    path: &std::path::Path,
    metrics_listen: Option<SocketAddr>,
    fail_fast: bool,
    instance_id: Option<String>,
) -> anyhow::Result<()> {
    let mut config = load(path)?;
    if instance_id.is_some() {
        config.group_instance_id = instance_id.clone();
    }
    let listen = metrics_listen.unwrap_or(config.metrics_listen);
    strait_core::health::serve(listen)?;
    tracing::info!(metrics = %format!("http://{listen}/metrics"), probes = %format!("http://{listen}/healthz, /readyz"), flows = config.flows.len(), "strait started");
    let signals = Signals::default();
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, signals.stop.clone()).context("installing the signal handler")?;
    }
    // SIGHUP reads the config file again and reloads policy components from their files (both
    // also reload when their file changes).
    let mut hangups =
        signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP]).context("installing the SIGHUP handler")?;
    let reload = signals.reload.clone();
    std::thread::Builder::new()
        .name("sighup".into())
        .spawn(move || {
            for _ in hangups.forever() {
                tracing::info!("SIGHUP: reloading the config and policy components");
                reload.store(true, std::sync::atomic::Ordering::Relaxed);
                strait_core::policy::request_reload();
            }
        })
        .context("starting the SIGHUP thread")?;
    let options = RunOptions { fail_fast, config_path: Some(path.to_path_buf()), instance_id };
    strait_core::flows::run(config, options, &signals)?;
    tracing::info!("strait stopped; positions stored for what the targets acknowledged");
    Ok(())
}

fn validate(path: &std::path::Path) -> anyhow::Result<()> {
    let config = load(path)?;
    for cluster in &config.clusters {
        println!("cluster {} at {}", cluster.alias, cluster.bootstrap_servers);
    }
    for flow in &config.flows {
        println!(
            "flow {}: policy {:?} (separator {:?}), replication.factor {}, refresh every {}s",
            flow.name(),
            flow.policy,
            flow.separator,
            flow.replication_factor,
            flow.refresh_interval.as_secs()
        );
        println!("  consumer {:?}\n  producer {:?}", flow.consumer, flow.producer);
        // The filters act on what the source holds: shown when it answers, a note when not.
        match strait_core::operator::preview_filters(&config, flow) {
            Ok(preview) => {
                for (what, list) in [
                    ("topics", &preview.topics),
                    ("groups", &preview.groups),
                    ("topic config keys", &preview.config_keys),
                ] {
                    let kept: Vec<&str> =
                        list.iter().filter(|(_, why)| why.is_none()).map(|(n, _)| n.as_str()).collect();
                    println!("  {what} kept ({}): {}", kept.len(), kept.join(", "));
                    // Names the regexes leave out can be thousands: counted. Those a policy or a
                    // rule refused are named.
                    let mut by_list = std::collections::BTreeMap::<&str, usize>::new();
                    for (name, why) in list.iter().filter_map(|(n, why)| why.map(|w| (n, w))) {
                        if why.contains(" / ") || why.ends_with(".exclude") {
                            *by_list.entry(why).or_default() += 1;
                        } else {
                            println!("    left out: {name} ({why})");
                        }
                    }
                    for (why, n) in by_list {
                        println!("    left out by {why}: {n}");
                    }
                }
            }
            Err(e) => println!("  filters not previewed: {e}"),
        }
    }
    println!("{} warning(s)", config.warnings.len());
    Ok(())
}
