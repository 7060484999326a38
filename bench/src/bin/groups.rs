//! What one checkpoint round costs to read the committed offsets of many consumer groups: the
//! groups are made on a cluster of their own (each commits an offset on every partition of one
//! topic), then strait's reader reads them all one group after another (the round before issue
//! 15) and with many requests in flight (the round now), and the run reports each way's wall
//! time and this process's CPU (librdkafka's threads included), checking both read the same.
//!
//! It then times whole checkpoint rounds' reading and translating, today's and the round before
//! issue 36 in turns (`ROUNDS` each): the committed offsets of every group, then each offset
//! translated through a stored mapping; today's round also reads the remote partitions'
//! extents and translates only what is settled ([`strait_core::offsets::Settled`]).
//!
//! Usage: strait-groups BOOTSTRAP GROUPS
//! (benches/groups.sh starts the cluster and runs it.)

#[path = "../admin.rs"]
mod admin;
#[path = "../process.rs"]
// Only `cpu_seconds` is used here; the harness uses the rest.
#[allow(dead_code)]
mod process;

use std::collections::HashSet;
use std::time::Instant;

use anyhow::{bail, Context};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use strait_core::checkpoints::{Committed, Groups, Translation, Verdict, Watched};
use strait_core::config::{ClientSettings, ClusterAlias, ClusterConfig};
use strait_core::offsets::{PartitionMap, Run, SourceOffset, TargetOffset};

const TOPIC: &str = "groups-bench";
const PARTITIONS: i32 = 3;
const PREFIX: &str = "bench-group-";
/// Checkpoint rounds timed per way, in turns.
const ROUNDS: usize = 7;
/// Threads committing for the groups being made (the commits wait on the network, not the CPU).
const MAKERS: usize = 16;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bootstrap, groups] = args.as_slice() else {
        bail!("usage: strait-groups BOOTSTRAP GROUPS");
    };
    let count: usize = groups.parse().context("GROUPS must be a number")?;
    let runtime = std::thread::available_parallelism().map_or(1, |n| n.get());
    admin::create_topics(bootstrap, &[TOPIC.to_string()], PARTITIONS)?;
    let cluster = ClusterConfig { alias: ClusterAlias::new("bench"), bootstrap_servers: bootstrap.clone(), line: 0 };
    let reader = Groups::connect(&cluster, &ClientSettings::default()).context("connecting the reader")?;
    let existing: HashSet<String> = reader.list().context("listing groups")?.into_iter().collect();
    let names: Vec<String> = (0..count).map(|i| format!("{PREFIX}{i}")).collect();
    let missing: Vec<&String> = names.iter().filter(|g| !existing.contains(*g)).collect();
    if !missing.is_empty() {
        let t = Instant::now();
        make_groups(bootstrap, &missing)?;
        eprintln!("made {} groups in {:.0} s", missing.len(), t.elapsed().as_secs_f64());
    }
    let partitions: Vec<(String, i32)> = (0..PARTITIONS).map(|p| (TOPIC.to_string(), p)).collect();

    let me = std::process::id();
    let cpu = || process::cpu_seconds(me).unwrap_or(0.0);
    let (t, c) = (Instant::now(), cpu());
    let listed = reader.list().context("listing groups")?;
    let (list_s, list_cpu) = (t.elapsed().as_secs_f64(), cpu() - c);

    let (t, c) = (Instant::now(), cpu());
    let mut one_by_one = Vec::with_capacity(count);
    for g in &names {
        one_by_one.push(reader.committed(g, &partitions).with_context(|| format!("reading group {g}"))?);
    }
    let (seq_s, seq_cpu) = (t.elapsed().as_secs_f64(), cpu() - c);

    let (t, c) = (Instant::now(), cpu());
    let in_flight = reader.committed_by_group(&names, &partitions);
    let (par_s, par_cpu) = (t.elapsed().as_secs_f64(), cpu() - c);

    let mut in_flight_offsets: Vec<Vec<Committed>> = Vec::with_capacity(count);
    for (g, r) in in_flight {
        in_flight_offsets.push(r.with_context(|| format!("reading group {g} with others"))?);
    }
    if in_flight_offsets != one_by_one {
        bail!("the two ways read different offsets");
    }
    let read: usize = one_by_one.iter().map(Vec::len).sum();
    if read != count * PARTITIONS as usize {
        bail!("read {read} committed offsets, expected {}", count * PARTITIONS as usize);
    }
    println!("| groups | way | wall s | CPU s | groups per wall-s |");
    println!("|---|---|---|---|---|");
    println!("| {} listed | ListGroups | {list_s:.2} | {list_cpu:.2} | - |", listed.len());
    println!(
        "| {count} | one group per request, in turn (before) | {seq_s:.2} | {seq_cpu:.2} | {:.0} |",
        count as f64 / seq_s
    );
    println!(
        "| {count} | {} requests in flight (now) | {par_s:.2} | {par_cpu:.2} | {:.0} |",
        strait_core::cluster::GROUPS_IN_FLIGHT,
        count as f64 / par_s
    );
    eprintln!("{read} committed offsets read both ways, identical; {runtime} cores");
    rounds(&reader, &names, &partitions, count)
}

/// Times `ROUNDS` checkpoint rounds of each way, in turns, and prints medians with their range.
fn rounds(reader: &Groups, names: &[String], partitions: &[(String, i32)], count: usize) -> anyhow::Result<()> {
    // Every partition replicated 1:1 up to 1000 (the groups committed below that).
    let mut translation = Translation::default();
    let mut watched = Vec::new();
    for (topic, partition) in partitions {
        let mut map = PartitionMap::default();
        map.open(Run { upstream: SourceOffset(0), downstream: TargetOffset(0), len: 1000 }, SourceOffset(1000));
        translation.forward.partitions.insert((topic.clone(), *partition), map);
        watched.push(Watched {
            source_topic: topic.clone(),
            partition: *partition,
            target_topic: topic.clone(),
            back: false,
        });
    }
    let me = std::process::id();
    let cpu = || process::cpu_seconds(me).unwrap_or(0.0);
    // (wall s, CPU s) of each round.
    let mut before: Vec<(f64, f64)> = Vec::new();
    let mut now: Vec<(f64, f64)> = Vec::new();
    for round in 0..ROUNDS * 2 {
        let settled = (round % 2 == 0) == (round / 2 % 2 == 0);
        let (t, c) = (Instant::now(), cpu());
        let read = reader.committed_by_group(names, partitions);
        let extents = if settled { reader.extents(partitions)? } else { Default::default() };
        let mut translated = 0usize;
        for (group, committed) in read {
            for c in committed.with_context(|| format!("reading group {group}"))? {
                let Some(w) = watched.iter().find(|w| w.source_topic == c.topic && w.partition == c.partition) else {
                    continue;
                };
                let written = if settled {
                    let extent = extents.get(&(w.target_topic.clone(), w.partition)).copied();
                    matches!(translation.checkpoint(&group, w, &c, extent), Verdict::Write(_))
                } else {
                    translation.resume_at(w, SourceOffset(c.offset)).is_some()
                };
                translated += usize::from(written);
            }
        }
        if translated != count * partitions.len() {
            bail!("a round translated {translated} offsets, expected {}", count * partitions.len());
        }
        let sample = (t.elapsed().as_secs_f64(), cpu() - c);
        if settled {
            now.push(sample)
        } else {
            before.push(sample)
        }
    }
    let summary = |v: &[(f64, f64)], pick: fn(&(f64, f64)) -> f64| {
        let mut x: Vec<f64> = v.iter().map(pick).collect();
        x.sort_by(f64::total_cmp);
        format!("{:.2} ({:.2}-{:.2})", x[x.len() / 2], x[0], x[x.len() - 1])
    };
    println!();
    println!("| checkpoint round, {count} groups, {ROUNDS} each in turns | wall s | CPU s |");
    println!("|---|---|---|");
    println!(
        "| translate through the stored mapping (before issue 36) | {} | {} |",
        summary(&before, |s| s.0),
        summary(&before, |s| s.1)
    );
    println!(
        "| read the remote extents, translate what is settled (now) | {} | {} |",
        summary(&now, |s| s.0),
        summary(&now, |s| s.1)
    );
    Ok(())
}

/// Commits offset `i % 1000` on every partition for each group, from a client of the group's own.
fn make_groups(bootstrap: &str, groups: &[&String]) -> anyhow::Result<()> {
    let chunk = groups.len().div_ceil(MAKERS).max(1);
    std::thread::scope(|s| {
        let workers: Vec<_> = groups
            .chunks(chunk)
            .map(|slice| {
                s.spawn(move || -> anyhow::Result<()> {
                    for (i, g) in slice.iter().enumerate() {
                        let c: BaseConsumer = ClientConfig::new()
                            .set("bootstrap.servers", bootstrap)
                            .set("group.id", g.as_str())
                            .set("enable.auto.commit", "false")
                            .create()
                            .context("consumer")?;
                        let mut tpl = TopicPartitionList::new();
                        for p in 0..PARTITIONS {
                            tpl.add_partition_offset(TOPIC, p, Offset::Offset((i % 1000) as i64))?;
                        }
                        c.commit(&tpl, CommitMode::Sync).with_context(|| format!("committing for {g}"))?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| w.join().map_err(|_| anyhow::anyhow!("a group maker panicked"))?)
    })
}
