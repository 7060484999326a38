//! Which compression codec strait's target producer should use: for each codec and two kinds of
//! records, an idempotent acks=all producer with strait's defaults (linger 5 ms) writes the same
//! records to a topic, and the run reports the bytes librdkafka sent to the brokers per record
//! (its own `tx_bytes` statistic: what crosses the WAN) and the producer's CPU per record
//! (this process's user + system time, librdkafka's threads included).
//!
//! Usage: strait-codecs BOOTSTRAP TOPIC RECORDS
//! (benches/codecs.sh creates the topic and runs it on the stand.)

#[path = "../process.rs"]
// Only `cpu_seconds` is used here; the harness uses the rest.
#[allow(dead_code)]
mod process;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;

const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];
const PARTITIONS: i32 = 6;

/// Keeps librdkafka's latest `tx_bytes`.
#[derive(Clone, Default)]
struct Stats(Arc<Mutex<u64>>);

impl ClientContext for Stats {
    fn stats_raw(&self, statistics: &[u8]) {
        let tx = serde_json::from_slice::<serde_json::Value>(statistics)
            .ok()
            .and_then(|v| v.get("tx_bytes").and_then(serde_json::Value::as_u64));
        if let Some(tx) = tx {
            *self.0.lock().unwrap_or_else(|p| p.into_inner()) = tx;
        }
    }
}

impl ProducerContext for Stats {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::message::DeliveryResult<'_>, _: ()) {}
}

/// A small deterministic generator, so every codec compresses the same bytes.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Kafka's `ProducerPerformance` payload, which the side-by-side benchmark replicates: random
/// capital letters.
fn letters(n: usize, size: usize) -> Vec<Vec<u8>> {
    let mut rng = XorShift(0x5eed);
    (0..n).map(|_| (0..size).map(|_| b'A' + (rng.next() % 26) as u8).collect()).collect()
}

/// JSON events of the kind applications write: repeated field names, short enums, ids, amounts.
fn json_events(n: usize) -> Vec<Vec<u8>> {
    let mut rng = XorShift(0x0dd5);
    let statuses = ["created", "paid", "packed", "shipped", "delivered", "returned"];
    let countries = ["DE", "FR", "KR", "RU", "US", "BR", "JP"];
    (0..n)
        .map(|i| {
            let items: Vec<String> = (0..1 + rng.next() % 4)
                .map(|_| format!(r#"{{"sku":"SKU-{:06}","qty":{},"price":{}.{:02}}}"#, rng.next() % 1_000_000, 1 + rng.next() % 5, rng.next() % 500, rng.next() % 100))
                .collect();
            format!(
                r#"{{"order_id":{},"customer_id":"c-{:08x}","status":"{}","country":"{}","created_at":"2026-11-{:02}T{:02}:{:02}:{:02}.{:03}Z","currency":"EUR","items":[{}]}}"#,
                1_000_000 + i,
                rng.next() as u32,
                statuses[(rng.next() % statuses.len() as u64) as usize],
                countries[(rng.next() % countries.len() as u64) as usize],
                1 + rng.next() % 28,
                rng.next() % 24,
                rng.next() % 60,
                rng.next() % 60,
                rng.next() % 1000,
                items.join(",")
            )
            .into_bytes()
        })
        .collect()
}

/// One run: (wire bytes per record, CPU microseconds per record).
fn run(bootstrap: &str, topic: &str, codec: &str, values: &[Vec<u8>]) -> anyhow::Result<(f64, f64)> {
    let stats = Stats::default();
    let producer: BaseProducer<Stats> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("compression.type", codec)
        .set("statistics.interval.ms", "100")
        .create_with_context(stats.clone())
        .context("producer")?;
    let me = std::process::id();
    let cpu_before = process::cpu_seconds(me).context("reading /proc/self/stat")?;
    for (i, value) in values.iter().enumerate() {
        let key = format!("key-{i}");
        let mut record = BaseRecord::to(topic).partition(i as i32 % PARTITIONS).key(&key).payload(value);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(e).context("sending"),
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(120)).context("flushing")?;
    let cpu = process::cpu_seconds(me).context("reading /proc/self/stat")? - cpu_before;
    // The statistics arrive every 100 ms; wait for one that covers the flush.
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_millis(400) {
        producer.poll(Duration::from_millis(50));
    }
    let sent = *stats.0.lock().unwrap_or_else(|p| p.into_inner());
    let n = values.len() as f64;
    Ok((sent as f64 / n, cpu * 1e6 / n))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bootstrap, topic, records] = args.as_slice() else {
        bail!("usage: strait-codecs BOOTSTRAP TOPIC RECORDS");
    };
    let n: usize = records.parse().context("RECORDS must be a number")?;
    let kinds = [("ProducerPerformance letters, 1 KiB", letters(n, 1024)), ("JSON order events", json_events(n))];
    println!("| records | codec | value bytes/record | wire bytes/record | wire/value | producer CPU µs/record | bytes saved per CPU-ms over none |");
    println!("|---|---|---|---|---|---|---|");
    for (name, values) in &kinds {
        let value_bytes = values.iter().map(Vec::len).sum::<usize>() as f64 / n as f64;
        let mut baseline = None;
        for codec in CODECS {
            let (wire, cpu) = run(bootstrap, topic, codec, values)?;
            let (base_wire, base_cpu) = *baseline.get_or_insert((wire, cpu));
            let extra_cpu_ms = (cpu - base_cpu) / 1000.0;
            let saved = if codec == "none" || extra_cpu_ms <= 0.0 {
                "-".to_string()
            } else {
                format!("{:.0}", (base_wire - wire) / extra_cpu_ms)
            };
            println!(
                "| {name} | {codec} | {value_bytes:.0} | {wire:.0} | {:.2} | {cpu:.2} | {saved} |",
                wire / value_bytes
            );
        }
    }
    Ok(())
}
