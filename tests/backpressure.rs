//! A stopped target back-pressures the fetcher: memory stays bounded and every record arrives.

mod support;

use std::time::{Duration, Instant};

use support::*;

/// strait's resident memory must stay under this while the target is frozen. The design
/// budget, at strait's defaults: a 16 MiB producer queue + 8 MiB of consumer prefetch (one queue
/// for all assigned partitions) + 3 channels × 2 batches × 1 MiB + a batch in each stage's
/// hands, plus the binary, the WASM engine and librdkafka's bookkeeping.
const RSS_BOUND_MIB: u64 = 256;
const RECORDS: usize = 250_000;
const VALUE: usize = 1024;

#[test]
fn a_frozen_target_broker_keeps_memory_bounded_and_loses_nothing() {
    let s = stand();
    // A target of its own: freezing the shared us-west would stall the other tests.
    let frozen_west = kafka_sh(&["start", "--fresh", "bp-west", "1", "27092"]);
    let topic = unique("backpressure");
    create_topic(&s.east, &topic, 3, 3, &[]);
    let config = format!(
        "clusters = us-east, bp-west\nus-east.bootstrap.servers = {}\nbp-west.bootstrap.servers = {frozen_west}\nus-east->bp-west.enabled = true\nus-east->bp-west.topics = {topic}\nreplication.factor = 1\n",
        s.east
    );
    let strait = Strait::start(&config);
    let remote = format!("us-east.{topic}");
    produce(&s.east, &topic, &[TestRecord::kv(0, "warm", "up")], &[]);
    read_all(&frozen_west, &remote, 1, Duration::from_secs(90));

    let pids: Vec<String> = kafka_sh_lines(&["pids", "bp-west"]);
    signal(&pids, "STOP");
    let frozen_at = Instant::now();
    let writer = {
        let (east, topic) = (s.east.clone(), topic.clone());
        std::thread::spawn(move || {
            let value = "x".repeat(VALUE);
            let records: Vec<TestRecord> =
                (0..RECORDS).map(|i| TestRecord::kv(i as i32 % 3, &i.to_string(), &value)).collect();
            produce(&east, &topic, &records, &[("linger.ms", "20")]);
        })
    };
    let mut max_rss_kib = 0;
    while frozen_at.elapsed() < Duration::from_secs(20) {
        max_rss_kib = max_rss_kib.max(strait.rss_kib().unwrap_or(0));
        std::thread::sleep(Duration::from_millis(100));
    }
    signal(&pids, "CONT");
    writer.join().expect("writer");
    let got = read_all(&frozen_west, &remote, RECORDS + 1, Duration::from_secs(300));
    max_rss_kib = max_rss_kib.max(strait.rss_kib().unwrap_or(0));
    let total: usize = got.iter().map(Vec::len).sum();
    eprintln!(
        "target frozen 20 s while {RECORDS} records of {VALUE} B arrived at the source; strait max RSS {} MiB",
        max_rss_kib / 1024
    );
    assert!(total > RECORDS, "only {total} of {} arrived; log:\n{}", RECORDS + 1, strait.log_text());
    assert!(
        max_rss_kib / 1024 < RSS_BOUND_MIB,
        "RSS reached {} MiB, over the {RSS_BOUND_MIB} MiB bound",
        max_rss_kib / 1024
    );
    drop(strait);
    kafka_sh(&["stop", "bp-west"]);
}

fn kafka_sh_lines(args: &[&str]) -> Vec<String> {
    let out = std::process::Command::new("bash")
        .arg(repo_root().join("scripts/kafka.sh"))
        .args(args)
        .output()
        .expect("kafka.sh");
    assert!(out.status.success(), "kafka.sh {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect()
}

fn signal(pids: &[String], sig: &str) {
    assert!(!pids.is_empty(), "no broker pids to signal");
    let status = std::process::Command::new("kill").arg(format!("-{sig}")).args(pids).status().expect("kill");
    assert!(status.success(), "kill -{sig} {pids:?}");
}
