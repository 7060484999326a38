//! A stopped target back-pressures the fetcher: memory stays bounded and every record arrives.

use std::time::{Duration, Instant};

use crate::support::*;

/// strait's resident memory must stay under this while the target is frozen. The design
/// budget, at strait's defaults: a 16 MiB producer queue + 8 MiB of consumer prefetch (one queue
/// for all assigned partitions) + 3 channels × 2 batches × 1 MiB + a batch in each stage's
/// hands, plus the binary, the WASM engine and librdkafka's bookkeeping.
const RSS_BOUND_MIB: u64 = 256;
const RECORDS: u64 = 250_000;
const VALUE: usize = 1024;
const PARTITIONS: i32 = 3;
const FLOW: &str = "us-east->bp-west";
/// Partition batches (a fetched batch's records of one partition) strait must fetch while the
/// target is frozen. A batch carries at most `strait.batch.max.bytes` (1 MiB) plus one record,
/// so fewer than ten carry less than 10 MiB of 1 KiB records: a fetcher that stopped within the
/// consumer's 8 MiB prefetch fails this.
const FROZEN_BATCHES: f64 = 10.0;

#[test]
fn a_frozen_target_broker_keeps_memory_bounded_and_loses_nothing() {
    let s = stand();
    // A target of its own: freezing the shared us-west would stall the other tests.
    let frozen = OwnCluster::start_to_freeze("bp-west", 27092);
    let frozen_west = frozen.bootstrap.clone();
    let topic = unique("backpressure");
    create_topic(&s.east, &topic, PARTITIONS, 3, &[]);
    let config = format!(
        "clusters = us-east, bp-west\nus-east.bootstrap.servers = {}\nbp-west.bootstrap.servers = {frozen_west}\nus-east->bp-west.enabled = true\nus-east->bp-west.topics = {topic}\nreplication.factor = 1\n",
        s.east
    );
    let strait = Strait::start(&config);
    let remote = format!("us-east.{topic}");
    produce(&s.east, &topic, &[TestRecord::kv(0, "warm", "up")], &[]);
    let warm = read_all(&frozen_west, &remote, 1, Duration::from_secs(90));
    assert_eq!(warm.iter().map(Vec::len).sum::<usize>(), 1, "warm-up never arrived; log:\n{}", strait.log_text());

    // One observation of the record-age histogram per source partition per fetched batch: its
    // count tells how many batches the fetcher read.
    let batches =
        |st: &Strait| st.metric("strait_replication_record_age_seconds_count", &[("flow", FLOW)]).unwrap_or(0.0);
    let batches_before = batches(&strait);
    frozen.freeze();
    let frozen_at = Instant::now();
    let writer = {
        let (east, topic) = (s.east.clone(), topic.clone());
        std::thread::spawn(move || {
            let records: Vec<TestRecord> = (0..RECORDS)
                .map(|i| TestRecord::kv((i % PARTITIONS as u64) as i32, &i.to_string(), &seq_value(i, VALUE)))
                .collect();
            produce(&east, &topic, &records, &[("linger.ms", "20")]);
        })
    };
    let mut max_rss_kib = 0;
    while frozen_at.elapsed() < Duration::from_secs(20) {
        max_rss_kib = max_rss_kib.max(strait.rss_kib().unwrap_or(0));
        std::thread::sleep(Duration::from_millis(100));
    }
    // Read before the thaw: what the fetcher did while nothing could leave strait. Without it
    // the memory bound also holds for a fetcher that stopped.
    let frozen_batches = batches(&strait) - batches_before;
    frozen.thaw();
    writer.join().expect("writer");
    // Sentinels after the load: each proves by arriving that its partition's records arrived.
    send_sentinels(&s.east, &topic, PARTITIONS);
    let got =
        read_through_sentinels(&frozen_west, &remote, PARTITIONS, Duration::from_secs(300)).unwrap_or_else(|| {
            panic!(
                "a sentinel did not arrive within 300 s: {} records on the target; log:\n{}",
                record_count(&frozen_west, &remote),
                strait.log_text()
            )
        });
    max_rss_kib = max_rss_kib.max(strait.rss_kib().unwrap_or(0));
    let warm_up = |r: &&TestRecord| r.value.as_deref() == Some(&b"up"[..]);
    let check = check_seqs(got.iter().flatten().filter(|r| !warm_up(r)), RECORDS);
    eprintln!(
        "target frozen 20 s while {RECORDS} records of {VALUE} B arrived at the source: strait fetched {frozen_batches} \
         partition batches meanwhile, max RSS {} MiB; {} duplicates",
        max_rss_kib / 1024,
        check.duplicates
    );
    assert!(
        frozen_batches >= FROZEN_BATCHES,
        "strait fetched {frozen_batches} partition batches while the target was frozen, fewer than the \
         {FROZEN_BATCHES} that 10 MiB takes at least; metrics:\n{}\nlog:\n{}",
        strait.metrics(),
        strait.log_text()
    );
    assert_eq!(check.missing, 0, "lost records, the first {:?}; log:\n{}", check.first_missing, strait.log_text());
    assert_eq!(check.foreign, 0, "records that are neither the warm-up nor the load");
    assert!(got.iter().flatten().any(|r| warm_up(&r)), "the warm-up record is there");
    assert!(
        max_rss_kib / 1024 < RSS_BOUND_MIB,
        "RSS reached {} MiB, over the {RSS_BOUND_MIB} MiB bound",
        max_rss_kib / 1024
    );
}
