//! The two measurements: draining a pre-loaded backlog, and following a steady load.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;

use crate::contenders::{start, Contender};
use crate::kafka::{Data, Stand};
use crate::process::{cpu_seconds, peak_rss_mib};

/// How long a contender may take to drain a backlog before the run is called failed.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(900);

/// A drained backlog.
#[derive(Debug, Clone, Serialize)]
pub struct Drain {
    /// Records replicated.
    pub records: u64,
    /// Value bytes replicated.
    pub bytes: u64,
    /// Seconds from the first replicated record to the last.
    pub seconds: f64,
    /// Records per second over those seconds.
    pub records_per_second: f64,
    /// MB (10^6 bytes) per second.
    pub mb_per_second: f64,
    /// CPU seconds (user + system) of the process over the drain.
    pub cpu_seconds: f64,
    /// CPU seconds of the process from its start to the end of the drain.
    pub cpu_seconds_with_startup: f64,
    /// Records per CPU-second over the drain.
    pub records_per_cpu_second: f64,
    /// Peak RSS of the process, MiB.
    pub peak_rss_mib: f64,
    /// Seconds from process start to the first replicated record.
    pub first_record_seconds: f64,
    /// Bytes the target stored per record: its log segments (record batches as the contender
    /// produced them, compressed or not) over the records. What crosses a WAN, less request
    /// framing.
    pub target_bytes_per_record: f64,
}

/// Drains `records` records of `size` bytes from `source_topic` with `contender`.
#[allow(clippy::too_many_arguments)] // one call site, every argument a different measure
pub fn drain(
    contender: Contender,
    stand: &Stand,
    source_topic: &str,
    partitions: i32,
    records: u64,
    size: usize,
    run: &str,
    out: &Path,
) -> anyhow::Result<Drain> {
    let started = Instant::now();
    let running = start(contender, stand, source_topic, partitions, run, out)?;
    let pid = running.child.0.id();
    let mut first: Option<(Instant, f64)> = None;
    let mut watermarks = None;
    loop {
        std::thread::sleep(Duration::from_millis(100));
        if started.elapsed() > DRAIN_TIMEOUT {
            bail!(
                "{} did not replicate {records} records in {}s; see {}/{run}.log",
                contender.name(),
                DRAIN_TIMEOUT.as_secs(),
                out.display()
            );
        }
        if watermarks.is_none() {
            if !stand.target_exists(&running.target_topic) {
                continue;
            }
            watermarks = Some(stand.watermark_client()?);
        }
        let Some(client) = &watermarks else { continue };
        let got = Stand::target_records(client, &running.target_topic, partitions);
        if got > 0 && first.is_none() {
            first = Some((Instant::now(), cpu_seconds(pid).unwrap_or(0.0)));
        }
        if got >= records {
            break;
        }
    }
    let end = Instant::now();
    let cpu_end = cpu_seconds(pid).context("the contender exited")?;
    let peak_rss_mib = peak_rss_mib(pid).unwrap_or(0.0);
    let (first_at, cpu_first) = first.unwrap_or((end, cpu_end));
    // A drain shorter than one sampling step is measured as one step.
    let seconds = end.duration_since(first_at).as_secs_f64().max(0.1);
    let cpu = (cpu_end - cpu_first).max(0.01);
    let bytes = records * size as u64;
    let target_bytes_per_record = stand.target_log_bytes(&running.target_topic) as f64 / records as f64;
    Ok(Drain {
        records,
        bytes,
        seconds,
        records_per_second: records as f64 / seconds,
        mb_per_second: bytes as f64 / seconds / 1e6,
        cpu_seconds: cpu,
        cpu_seconds_with_startup: cpu_end,
        records_per_cpu_second: records as f64 / cpu,
        peak_rss_mib,
        first_record_seconds: first_at.duration_since(started).as_secs_f64(),
        target_bytes_per_record,
    })
}

/// Replication latency under a steady load.
#[derive(Debug, Clone, Serialize)]
pub struct Steady {
    /// Records per second asked of the producer.
    pub rate: u64,
    /// Records per second the producer achieved over the measured load (below `rate` when
    /// the machine could not produce that fast: then latency includes the producer's queue).
    pub achieved_rate: f64,
    /// Records measured (after the warm-up).
    pub samples: usize,
    /// Latency percentiles, ms: arrival at a consumer on the target minus the source
    /// record's timestamp.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// strait only, from its own histograms (one observation per partition and batch: the
    /// batch's oldest record), over every partition: p50 and p99 ms from the source
    /// timestamp to the fetch, and to the target's acknowledgement. Where its latency goes.
    pub inside_ms: Option<Inside>,
}

/// strait's own view of where a record's time goes.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Inside {
    /// Source timestamp to fetched, p50.
    pub fetched_p50: f64,
    /// Source timestamp to fetched, p99.
    pub fetched_p99: f64,
    /// Source timestamp to acknowledged by the target, p50.
    pub acked_p50: f64,
    /// Source timestamp to acknowledged by the target, p99.
    pub acked_p99: f64,
}

/// Reads strait's `/metrics` and estimates, from its record age (at fetch) and replication
/// latency (at acknowledgement) histograms summed over partitions, their p50 and p99.
fn inside(port: u16) -> Option<Inside> {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    conn.read_to_string(&mut text).ok()?;
    let quantile = |metric: &str, q: f64| bucket_quantile(&text, metric, q).map(|s| s * 1000.0);
    Some(Inside {
        fetched_p50: quantile("strait_replication_record_age_seconds", 0.5)?,
        fetched_p99: quantile("strait_replication_record_age_seconds", 0.99)?,
        acked_p50: quantile("strait_replication_latency_seconds", 0.5)?,
        acked_p99: quantile("strait_replication_latency_seconds", 0.99)?,
    })
}

/// The `q` quantile of a Prometheus histogram summed over its series, interpolated linearly
/// inside the bucket it falls in (as PromQL's `histogram_quantile` does).
fn bucket_quantile(text: &str, metric: &str, q: f64) -> Option<f64> {
    let prefix = format!("{metric}_bucket{{");
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for line in text.lines().filter(|l| l.starts_with(&prefix)) {
        let le = line.split("le=\"").nth(1)?.split('"').next()?;
        let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
        let count: f64 = line.rsplit(' ').next()?.parse().ok()?;
        match buckets.iter_mut().find(|(b, _)| *b == le) {
            Some((_, c)) => *c += count,
            None => buckets.push((le, count)),
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for (le, cumulative) in buckets {
        if cumulative >= rank {
            if le.is_infinite() {
                return Some(lower);
            }
            let inside = cumulative - below;
            return Some(if inside > 0.0 { lower + (le - lower) * (rank - below) / inside } else { le });
        }
        (lower, below) = (le, cumulative);
    }
    None
}

/// Produces `rate` records per second of `size` bytes for `seconds` into a fresh topic while
/// `contender` replicates it, and measures each record's latency on the target.
#[allow(clippy::too_many_arguments)] // one call site, every argument a different knob of the load
pub fn steady(
    contender: Contender,
    stand: &Stand,
    partitions: i32,
    size: usize,
    rate: u64,
    seconds: u64,
    run: &str,
    out: &Path,
) -> anyhow::Result<Steady> {
    let source_topic = format!("steady-{run}");
    stand.create_topic(true, &source_topic, partitions)?;
    let running = start(contender, stand, &source_topic, partitions, run, out)?;
    // MM2 and strait create the remote topic themselves once they see the source.
    let deadline = Instant::now() + Duration::from_secs(180);
    while !stand.target_exists(&running.target_topic) {
        if Instant::now() > deadline {
            bail!("{} never created {}; see {}/{run}.log", contender.name(), running.target_topic, out.display());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // A warm-up load first (connections, JIT, MM2's tasks starting after its topic appears),
    // then the measured load; only records written after the warm-up was replicated count.
    let warm_up = rate * WARM_UP_SECONDS;
    let total = warm_up + rate * seconds;
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicU64::new(0));
    let (west, topic) = (stand.west_tools.clone(), running.target_topic.clone());
    let reader = {
        let (stop, seen) = (stop.clone(), seen.clone());
        std::thread::spawn(move || read_latencies(&west, &topic, partitions, total, &stop, &seen))
    };
    run_producer(stand, &source_topic, warm_up, size, rate)?;
    let deadline = Instant::now() + Duration::from_secs(180);
    while seen.load(Ordering::Relaxed) < warm_up && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let measured_from = now_ms();
    run_producer(stand, &source_topic, rate * seconds, size, rate)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !reader.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    let arrivals = reader.join().map_err(|_| anyhow::anyhow!("latency reader panicked"))??;
    let inside_ms = running.metrics_port.and_then(inside);
    drop(running);
    let measured: Vec<&(i64, f64)> = arrivals.iter().filter(|(ts, _)| *ts >= measured_from).collect();
    let span_ms =
        measured.iter().map(|(ts, _)| *ts).max().unwrap_or(0) - measured.iter().map(|(ts, _)| *ts).min().unwrap_or(0);
    let achieved_rate = measured.len() as f64 / (span_ms.max(1) as f64 / 1000.0);
    let mut steady: Vec<f64> = measured.iter().map(|(_, latency)| *latency).collect();
    if steady.is_empty() {
        bail!("{} replicated nothing in steady mode; see {}/{run}.log", contender.name(), out.display());
    }
    steady.sort_by(f64::total_cmp);
    let pct = |p: f64| steady[((steady.len() as f64 * p) as usize).min(steady.len() - 1)];
    Ok(Steady {
        rate,
        achieved_rate,
        samples: steady.len(),
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        p999_ms: pct(0.999),
        inside_ms,
    })
}

/// Seconds of load before the measured load.
pub const WARM_UP_SECONDS: u64 = 5;

fn run_producer(stand: &Stand, topic: &str, records: u64, size: usize, rate: u64) -> anyhow::Result<()> {
    let status = stand
        .producer_performance(topic, records, size, Some(rate), Data::Random)?
        .spawn()
        .context("starting ProducerPerformance")?
        .wait()
        .context("steady producer")?;
    if !status.success() {
        bail!("the steady producer failed ({status})");
    }
    Ok(())
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Reads `topic` on the target until `total` records arrived or `stop`, counting them in
/// `seen`; returns each record's (source timestamp, latency in ms).
fn read_latencies(
    west: &str,
    topic: &str,
    partitions: i32,
    total: u64,
    stop: &AtomicBool,
    seen: &AtomicU64,
) -> anyhow::Result<Vec<(i64, f64)>> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", west)
        .set("group.id", "strait-bench-latency")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "5")
        .create()
        .context("latency consumer")?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    c.assign(&tpl)?;
    let mut out = Vec::with_capacity(total as usize);
    while (out.len() as u64) < total && !stop.load(Ordering::Relaxed) {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            if let Some(ts) = m.timestamp().to_millis() {
                out.push((ts, (now_ms() - ts) as f64));
                seen.store(out.len() as u64, Ordering::Relaxed);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::bucket_quantile;

    #[test]
    fn quantiles_from_buckets_summed_over_series() {
        let text = "x_bucket{p=\"0\",le=\"0.005\"} 10\nx_bucket{p=\"0\",le=\"0.01\"} 20\nx_bucket{p=\"0\",le=\"+Inf\"} 20\n\
                    x_bucket{p=\"1\",le=\"0.005\"} 0\nx_bucket{p=\"1\",le=\"0.01\"} 10\nx_bucket{p=\"1\",le=\"+Inf\"} 20\n";
        // 40 observations: 10 up to 5 ms, 20 in 5-10 ms, 10 beyond.
        assert_eq!(bucket_quantile(text, "x", 0.25), Some(0.005));
        assert!((bucket_quantile(text, "x", 0.5).unwrap() - 0.0075).abs() < 1e-9);
        assert_eq!(bucket_quantile(text, "x", 0.99), Some(0.01), "past the last finite bucket: its bound");
        assert_eq!(bucket_quantile(text, "y", 0.5), None);
    }
}
