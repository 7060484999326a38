//! Moving every group of a flow at once: `strait failover --flow` and `strait failback`.

use anyhow::Context;
use strait_core::checkpoints::SyncOutcome;
use strait_core::config::Config;
use strait_core::operator::{apply_failover, plan_flow_failover, FailoverPlan, FlowView};
use strait_core::policy::ReplicationPolicy;

/// `source->target` as its two aliases.
pub fn flow_ends(flow: &str) -> anyhow::Result<(&str, &str)> {
    flow.split_once("->")
        .filter(|(s, t)| !s.is_empty() && !t.is_empty())
        .with_context(|| format!("--flow `{flow}`: write it as source->target, e.g. us-east->us-west"))
}

fn load(config: &Config, from: &str, to: &str) -> anyhow::Result<FlowView> {
    FlowView::load(config, from, to).with_context(|| format!("reading the state of flow {from}->{to}"))
}

/// `strait failover --flow`.
pub fn failover_flow(config: &Config, flow: &str, apply: bool) -> anyhow::Result<()> {
    let (from, to) = flow_ends(flow)?;
    let view = load(config, from, to)?;
    let plans = plan_flow_failover(&view).with_context(|| format!("planning the failover of {flow}"))?;
    println!(
        "flow {from}->{to}: failover of {} group(s) to {to}{}",
        plans.len(),
        if view.source_reachable { "" } else { &" (source unreachable: positions from checkpoints, RPO unknown)" }
    );
    move_groups(&view, &plans, apply, to)
}

/// `strait failback --flow A->B`: the failover of the way home, `B->A`, after checks that it can
/// bring home what was written on B.
pub fn failback(config: &Config, flow: &str, apply: bool) -> anyhow::Result<()> {
    let (a, b) = flow_ends(flow)?;
    if !config.flows.iter().any(|f| f.source.as_str() == b && f.target.as_str() == a) {
        anyhow::bail!(
            "the way home {b}->{a} is not enabled: add `{b}->{a}.enabled = true` and `{b}->{a}.topics` (the topics \
             written on {b} during the outage) to the config, run strait with it until `strait status` shows its lag \
             at 0, then run failback again"
        );
    }
    let home = load(config, b, a)?;
    println!("flow {a}->{b}: failback of its groups to {a}, through the way home {b}->{a}");
    let sample = home.naming.format_remote_topic(b, "orders").context("asking the naming policy")?;
    if sample == "orders" {
        println!(
            "names: identity. Records written on {b} come home to {a} under their own names; records {b} holds \
             because {a} sent them carry the provenance header naming {a} and are not sent back. A topic that \
             holds records of both origins is interleaved differently on each side, so a group resumes there at \
             the lower of its two translations: nothing is skipped, records of one origin may be read again"
        );
    } else {
        let copy = home.naming.format_remote_topic(a, "orders").context("asking the naming policy")?;
        println!(
            "names: prefixed. Records written on {b}'s own topics come home to {a} as `{sample}` (for `orders`), \
             beside {a}'s own `orders`; {b}'s copies of {a}'s topics (`{copy}`) are not sent back, their names say \
             they came from {a}; consumers on {a} read both `orders` and `{sample}`"
        );
    }
    if home.translation.forward.partitions.is_empty() {
        println!(
            "warning: {b}->{a} has stored no position yet; records written on {b} come home only once a strait runs it"
        );
    }
    let plans = plan_flow_failover(&home).with_context(|| format!("planning the failback of {flow}"))?;
    if let Some(behind) = plans.first().filter(|p| p.source_reachable).map(|p| &p.lags) {
        let records: i64 = behind.iter().map(|l| l.unreplicated).sum();
        println!("not home yet: {records} record(s) written on {b} that {b}->{a} has not copied to {a}");
    }
    move_groups(&home, &plans, apply, a)
}

/// Prints the plans, and with `apply` commits each group's positions on `to`.
fn move_groups(view: &FlowView, plans: &[FailoverPlan], apply: bool, to: &str) -> anyhow::Result<()> {
    let secs = |ms: Option<i64>| ms.map_or_else(|| "-".to_string(), |ms| format!("{:.1}", ms as f64 / 1000.0));
    println!("{:<40} {:>10} {:>8} {:>12} {:>12}", "group", "partitions", "moved", "RPO records", "RPO oldest s");
    for p in plans {
        let moved = p.positions.iter().filter(|x| x.translated.is_some()).count();
        let rpo = p.rpo_records().map_or_else(|| "unknown".to_string(), |r| r.to_string());
        println!("{:<40} {:>10} {:>8} {:>12} {:>12}", p.group, p.positions.len(), moved, rpo, secs(p.rpo_age_ms()));
    }
    println!(
        "{:<40} {:<40} {:>9} {:>12} {:>12}",
        "group", "topic on the new side", "partition", "upstream", "resume at"
    );
    let show = |v: Option<i64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    for p in plans {
        for x in &p.positions {
            println!(
                "{:<40} {:<40} {:>9} {:>12} {:>12}",
                p.group,
                x.watched.target_topic,
                x.watched.partition,
                show(x.committed.map(|c| c.get())),
                show(x.translated.map(|t| t.get()))
            );
        }
    }
    if !apply {
        println!("dry run: add --apply to commit these positions on {to}");
        return Ok(());
    }
    let mut busy = Vec::new();
    for p in plans {
        match apply_failover(view, p).with_context(|| format!("committing offsets for {} on {to}", p.group))? {
            SyncOutcome::Committed(n) => {
                println!("applied {}: {n} partition(s) moved forward on {to}; the others were already there", p.group)
            }
            SyncOutcome::Active(members) => {
                println!("not applied {}: {members} active member(s) on {to}", p.group);
                busy.push(p.group.clone());
            }
        }
    }
    if !busy.is_empty() {
        anyhow::bail!(
            "{} group(s) have members on {to} and were not moved: {}; stop their consumers there and run again",
            busy.len(),
            busy.join(", ")
        );
    }
    Ok(())
}
