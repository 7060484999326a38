//! The operator commands' output: plain tables, one row per partition or flow.

use anyhow::Context;
use strait_core::checkpoints::SyncOutcome;
use strait_core::config::Config;
use strait_core::operator::{apply_failover, flow_status, plan_failover, translate_group, FlowView};

fn show(v: Option<impl std::fmt::Display>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn view(config: &Config, from: &str, to: &str) -> anyhow::Result<FlowView> {
    FlowView::load(config, from, to).with_context(|| format!("reading the state of flow {from}->{to}"))
}

/// `strait offsets translate`.
pub fn translate(config: &Config, group: &str, from: &str, to: &str) -> anyhow::Result<()> {
    let view = view(config, from, to)?;
    let rows = translate_group(&view, group)?;
    println!(
        "group {group}: {from} -> {to}{}",
        if view.source_reachable { "" } else { " (source unreachable: from checkpoints)" }
    );
    println!("{:<32} {:>9} {:>12}  {:<40} {:>12}", "topic", "partition", "committed", "target topic", "translated");
    for r in rows {
        let w = &r.watched;
        println!(
            "{:<32} {:>9} {:>12}  {:<40} {:>12}",
            w.source_topic,
            w.partition,
            show(r.committed),
            w.target_topic,
            show(r.translated)
        );
    }
    Ok(())
}

/// `strait failover`.
pub fn failover(config: &Config, group: &str, from: &str, to: &str, apply: bool) -> anyhow::Result<()> {
    let view = view(config, from, to)?;
    let plan = plan_failover(&view, group)?;
    println!("group {group}: failover {from} -> {to}");
    if plan.source_reachable {
        let records: i64 = plan.lags.iter().map(|l| l.unreplicated).sum();
        let oldest = plan.lags.iter().filter_map(|l| l.oldest_age_ms).max();
        println!(
            "RPO: {records} record(s) not replicated yet{}",
            oldest.map_or(String::new(), |ms| format!(", the oldest written {:.1}s ago", ms as f64 / 1000.0))
        );
        println!("{:<32} {:>9} {:>14} {:>14}", "source topic", "partition", "unreplicated", "oldest age s");
        for l in &plan.lags {
            let age = l.oldest_age_ms.map_or_else(|| "-".to_string(), |ms| format!("{:.1}", ms as f64 / 1000.0));
            println!("{:<32} {:>9} {:>14} {:>14}", l.topic, l.partition, l.unreplicated, age);
        }
    } else {
        println!("RPO: unknown, {from} is unreachable; positions come from the latest checkpoints");
    }
    println!("{:<40} {:>9} {:>12} {:>12}", "target topic", "partition", "upstream", "resume at");
    for p in &plan.positions {
        println!(
            "{:<40} {:>9} {:>12} {:>12}",
            p.watched.target_topic,
            p.watched.partition,
            show(p.committed),
            show(p.translated)
        );
    }
    if !apply {
        println!("dry run: add --apply to commit these positions for {group} on {to}");
        return Ok(());
    }
    match apply_failover(&view, &plan).with_context(|| format!("committing offsets for {group} on {to}"))? {
        SyncOutcome::Committed(n) => {
            println!("applied: {n} partition(s) of {group} moved forward on {to}; the others were already there")
        }
        SyncOutcome::Active(members) => {
            anyhow::bail!("{group} has {members} active member(s) on {to}; stop its consumers there and run again")
        }
    }
    Ok(())
}

/// `strait status`: per flow, its state in the running process (from its metrics endpoint at
/// `metrics`) beside what the clusters show.
pub fn status(config: &Config, metrics: std::net::SocketAddr) -> anyhow::Result<()> {
    let states = get(metrics, "/metrics").map(|page| flow_states(&page));
    if states.is_none() {
        println!("no strait process answers at http://{metrics}/metrics: flow states unknown (give --metrics ADDR:PORT if it listens elsewhere)");
    }
    // What the process says of each flow that is not ready or retried something lately: a
    // cluster that stopped answering its clients shows here while its state is still `running`.
    let why = get(metrics, "/readyz").map(|body| readiness_reasons(&body)).unwrap_or_default();
    // The state and the group go last so that scripts reading the older columns by position
    // keep working.
    println!(
        "{:<28} {:>14} {:>18} {:>12} {:>10}  state  group",
        "flow", "heartbeat age s", "replicated hb age s", "lag records", "lag s"
    );
    let secs = |ms: Option<i64>| ms.map_or_else(|| "-".to_string(), |ms| format!("{:.1}", ms as f64 / 1000.0));
    for flow in &config.flows {
        let (from, to) = (flow.source.as_str(), flow.target.as_str());
        let state = states.as_ref().and_then(|m| m.get(&flow.name()).cloned()).unwrap_or_else(|| "unknown".into());
        let state = format!("state={state}");
        let says = why.get(&flow.name()).map(|w| format!("  process says: {w}")).unwrap_or_default();
        match view(config, from, to).and_then(|v| Ok(flow_status(&v)?)) {
            Ok(s) => {
                let lag_s = s.lag_seconds.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
                println!(
                    "{:<28} {:>14} {:>18} {:>12} {:>10}  {}  group={}{says}",
                    s.flow,
                    secs(s.heartbeat_age_ms),
                    secs(s.replicated_heartbeat_age_ms),
                    show(s.lag_records),
                    lag_s,
                    state,
                    s.group
                );
            }
            Err(e) => println!("{:<28} clusters not readable: {e:#}  {state}{says}", flow.name()),
        }
    }
    Ok(())
}

/// The body of `GET path` from the running process at `addr`, if it answers.
fn get(addr: std::net::SocketAddr, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let timeout = std::time::Duration::from_secs(3);
    let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes()).ok()?;
    let mut page = String::new();
    stream.read_to_string(&mut page).ok()?;
    Some(page.split_once("\r\n\r\n").map_or(page.as_str(), |(_, body)| body).to_string())
}

/// Per flow, why `/readyz` names it: its `not_ready` and `retrying` entries.
fn readiness_reasons(body: &str) -> std::collections::HashMap<String, String> {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(body) else { return Default::default() };
    ["not_ready", "retrying"]
        .iter()
        .filter_map(|key| value.get(key)?.as_object())
        .flatten()
        .filter_map(|(flow, why)| Some((flow.clone(), why.as_str()?.to_string())))
        .collect()
}

/// Parses `strait_flow_state{flow="a->b",state="running"} 1` lines: the state whose value is 1.
fn flow_states(page: &str) -> std::collections::HashMap<String, String> {
    let mut states = std::collections::HashMap::new();
    for line in page.lines() {
        let Some(rest) = line.strip_prefix("strait_flow_state{") else { continue };
        let Some((labels, value)) = rest.split_once('}') else { continue };
        if value.trim().parse::<f64>().ok() != Some(1.0) {
            continue;
        }
        let label = |name: &str| {
            let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
            let end = labels[start..].find('"')? + start;
            Some(labels[start..end].to_string())
        };
        if let (Some(flow), Some(state)) = (label("flow"), label("state")) {
            states.insert(flow, state);
        }
    }
    states
}

#[cfg(test)]
mod tests {
    #[test]
    fn readiness_reasons_name_each_flow_not_ready_or_retrying() {
        let body = r#"{"ready":false,"flows":3,"not_ready":{"a->b":"running; cluster `b` has not answered"},"retrying":{"c->b":"running; retrying: x"}}"#;
        let why = super::readiness_reasons(body);
        assert_eq!(why.get("a->b").map(String::as_str), Some("running; cluster `b` has not answered"));
        assert_eq!(why.get("c->b").map(String::as_str), Some("running; retrying: x"));
        assert_eq!(why.len(), 2);
    }

    #[test]
    fn the_state_set_to_one_is_the_flows_state() {
        let page = "strait_flow_state{flow=\"a->b\",state=\"running\"} 1\nstrait_flow_state{flow=\"a->b\",state=\"parked\"} 0\nstrait_flow_state{state=\"parked\",flow=\"b->a\"} 1\n";
        let states = super::flow_states(page);
        assert_eq!(states.get("a->b").map(String::as_str), Some("running"));
        assert_eq!(states.get("b->a").map(String::as_str), Some("parked"));
    }
}
