//! `strait policy test`: runs a policy component's hooks without Kafka, on records from a file,
//! and prints what each hook answered. What a component does here it does in `strait run`: the
//! same engine, limits and flow properties.

use std::collections::{BTreeMap, HashSet};
use std::io::BufRead;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use serde_json::{json, Value};
use strait_core::config::{Config, FlowConfig};
use strait_core::policy::{BatchHook, FlowPolicy, PolicyEngine, ReplicationPolicy, WasmNaming};
use strait_core::record::{Batch, Headers, SourceOffset};

/// The options as typed.
#[derive(clap::Args)]
pub struct PolicyTestArgs {
    /// The component (`.wasm`).
    #[arg(long, value_name = "FILE")]
    pub component: PathBuf,
    /// Records for the record hook, one JSON object per line: `{"topic": "orders", "key": "k",
    /// "value": "v", "headers": {"h": "x"}, "timestamp": 1700000000000}` (key, value and header
    /// values may be null; headers may also be a list of [key, value] pairs).
    #[arg(long, value_name = "FILE.jsonl")]
    pub records: Option<PathBuf>,
    /// A `replication.policy.*` property handed to `init`, as KEY=VALUE; repeat for more.
    #[arg(long = "property", value_name = "KEY=VALUE")]
    pub properties: Vec<String>,
    /// The flow's source alias.
    #[arg(long, value_name = "ALIAS", default_value = "us-east")]
    pub from: String,
    /// The flow's target alias.
    #[arg(long, value_name = "ALIAS", default_value = "us-west")]
    pub to: String,
    /// Ask the naming and the topic filter about this topic too; repeat for more.
    #[arg(long = "topic", value_name = "TOPIC")]
    pub topics: Vec<String>,
    /// Ask the group filter about this group; repeat for more.
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,
    /// Ask the topic-config filter about this key; repeat for more.
    #[arg(long = "config-key", value_name = "KEY")]
    pub config_keys: Vec<String>,
}

/// One record of the input file.
struct Input {
    topic: String,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    timestamp: i64,
}

fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone().into_bytes()),
        other => Some(other.to_string().into_bytes()),
    }
}

fn parse(line: &str, n: usize) -> anyhow::Result<Input> {
    let v: Value = serde_json::from_str(line).with_context(|| format!("line {n}: not a JSON object"))?;
    let headers = match &v["headers"] {
        Value::Object(map) => map.iter().map(|(k, v)| (k.clone().into_bytes(), bytes(v))).collect(),
        Value::Array(pairs) => pairs
            .iter()
            .map(|p| match p.as_array().map(Vec::as_slice) {
                Some([k, v]) => Ok((k.as_str().unwrap_or_default().as_bytes().to_vec(), bytes(v))),
                _ => anyhow::bail!("line {n}: a header is [key, value]"),
            })
            .collect::<anyhow::Result<_>>()?,
        Value::Null => Vec::new(),
        _ => anyhow::bail!("line {n}: `headers` is an object or a list of [key, value] pairs"),
    };
    Ok(Input {
        topic: v["topic"].as_str().unwrap_or("topic").to_string(),
        key: bytes(&v["key"]),
        value: bytes(&v["value"]),
        headers,
        timestamp: v["timestamp"].as_i64().unwrap_or(0),
    })
}

fn text(b: Option<&[u8]>) -> Value {
    b.map_or(Value::Null, |b| Value::String(String::from_utf8_lossy(b).to_string()))
}

fn headers_json(h: Headers<'_>) -> Value {
    Value::Array(h.map(|(k, v)| json!([String::from_utf8_lossy(k), text(v)])).collect())
}

/// Runs `strait policy test`.
pub fn policy_test(args: PolicyTestArgs) -> anyhow::Result<()> {
    let flow = test_flow(&args)?;
    let engine = PolicyEngine::shared()?;
    let started = Instant::now();
    let component = engine.load_file(&args.component).with_context(|| args.component.display().to_string())?;
    let compiled = started.elapsed();
    let started = Instant::now();
    let instance = component.instantiate(&flow)?;
    let instantiated = started.elapsed();
    let hooks = instance.hooks();
    let listed = hooks.names();
    println!(
        "component {}: hooks {}; compiled in {} ms, instantiated and init in {} ms, linear memory {:.1} MiB",
        args.component.display(),
        if listed.is_empty() { "none".to_string() } else { listed.join(", ") },
        compiled.as_millis(),
        instantiated.as_millis(),
        instance.memory_bytes() as f64 / (1 << 20) as f64
    );
    let inputs = match &args.records {
        Some(path) => read_inputs(path)?,
        None => Vec::new(),
    };
    let mut topics: Vec<String> = args.topics.clone();
    topics.extend(inputs.iter().map(|i| i.topic.clone()));
    topics.sort();
    topics.dedup();
    let policy = FlowPolicy::load(engine, &flow)?;
    if hooks.naming {
        let naming = WasmNaming::new(policy.naming.instantiate(&flow)?);
        for t in &topics {
            println!("naming: {t} -> {}", naming.format_remote_topic(&args.from, t)?);
        }
    }
    let filters = policy.filters(&flow)?;
    let keep = |yes: bool| if yes { "kept" } else { "left out" };
    for t in topics.iter().filter(|_| hooks.topic_filter) {
        println!("filters.topic: {t} {}", keep(filters.topic(t)?));
    }
    for g in args.groups.iter().filter(|_| hooks.group_filter) {
        println!("filters.group: {g} {}", keep(filters.group(g)?));
    }
    for k in args.config_keys.iter().filter(|_| hooks.config_filter) {
        println!("filters.topic-config: {k} {}", keep(filters.topic_config(k)?));
    }
    match (&policy.records, inputs.is_empty()) {
        (_, true) => Ok(()),
        (None, false) => {
            println!("records: the component has no record hook; every record goes on unchanged");
            Ok(())
        }
        (Some(records), false) => run_records(BatchHook::new(records.instantiate(&flow)?), &inputs),
    }
}

/// The flow `--from->--to` the component is tested in, with its `--property` keys.
fn test_flow(args: &PolicyTestArgs) -> anyhow::Result<FlowConfig> {
    let (from, to) = (args.from.as_str(), args.to.as_str());
    let mut config = format!(
        "clusters = {from}, {to}\n{from}.bootstrap.servers = localhost:1\n{to}.bootstrap.servers = localhost:2\n\
         {from}->{to}.enabled = true\nreplication.policy.wasm = {}\n",
        args.component.display()
    );
    for p in &args.properties {
        let (k, v) = p.split_once('=').with_context(|| format!("--property `{p}`: write it as KEY=VALUE"))?;
        anyhow::ensure!(
            k.trim().starts_with("replication.policy."),
            "--property `{p}`: a component is given only `replication.policy.*` keys"
        );
        config.push_str(&format!("{} = {}\n", k.trim(), v.trim()));
    }
    Ok(Config::parse(&config).context("the flow the component is tested in")?.flows.remove(0))
}

/// The records of a JSONL file.
fn read_inputs(path: &std::path::Path) -> anyhow::Result<Vec<Input>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if !line.trim().is_empty() {
            out.push(parse(&line, n + 1).with_context(|| path.display().to_string())?);
        }
    }
    Ok(out)
}

/// Runs the record hook on every input record as one batch and prints one JSON line per record.
fn run_records(mut hook: BatchHook, inputs: &[Input]) -> anyhow::Result<()> {
    let mut slots: BTreeMap<&str, u32> = BTreeMap::new();
    let mut batch = Batch::with_capacity(inputs.len(), 1 << 16);
    for (i, r) in inputs.iter().enumerate() {
        let next = slots.len() as u32;
        let slot = *slots.entry(r.topic.as_str()).or_insert(next);
        let headers = r.headers.iter().map(|(k, v)| (k.as_slice(), v.as_deref()));
        batch.push(slot, SourceOffset(i as i64), r.timestamp, r.key.as_deref(), r.value.as_deref(), headers);
    }
    let names: BTreeMap<u32, String> = slots.iter().map(|(t, s)| (*s, t.to_string())).collect();
    let started = Instant::now();
    hook.pack(&mut batch, |slot| names.get(&slot).cloned().unwrap_or_default());
    let verdict = hook.call();
    hook.unpack(&mut batch);
    let verdict = verdict.context("records.on-batch")?;
    let took = started.elapsed();
    let dropped: HashSet<u32> = verdict.drop.iter().copied().collect();
    let edited: HashSet<u32> = verdict.edits.iter().map(|e| e.position).collect();
    // The records as they leave: the same rewrite the transform stage makes.
    for edit in verdict.edits {
        batch.apply(edit);
    }
    for (i, r) in batch.records.iter().enumerate() {
        let position = i as u32;
        let line = if dropped.contains(&position) {
            json!({"record": i, "verdict": "drop"})
        } else if !edited.contains(&position) {
            json!({"record": i, "verdict": "keep"})
        } else {
            json!({
                "record": i,
                "verdict": "edit",
                "key": text(batch.key(r)),
                "value": text(batch.value(r)),
                "headers": headers_json(batch.headers(r)),
                "timestamp": r.timestamp,
                "topic": r.route.as_deref(),
            })
        };
        println!("{line}");
    }
    println!(
        "records: {} in, {} dropped, {} edited; the hook took {:.2} ms ({:.1} µs a record)",
        inputs.len(),
        dropped.len(),
        edited.len(),
        took.as_secs_f64() * 1e3,
        took.as_secs_f64() * 1e6 / inputs.len() as f64
    );
    Ok(())
}
