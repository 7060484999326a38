//! At-least-once across `kill -9`: nothing is lost, order holds, duplicates are counted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;

const RECORDS: usize = 100_000;
const PARTITIONS: i32 = 3;

#[test]
fn kill_9_mid_stream_then_restart_loses_no_record_and_keeps_partition_order() {
    let s = stand();
    let topic = unique("kill9");
    create_topic(&s.east, &topic, PARTITIONS, 3, &[("min.insync.replicas", "2")]);
    let remote = format!("us-east.{topic}");

    // The source keeps receiving records while strait runs, is killed, and restarts.
    let producing = Arc::new(AtomicBool::new(true));
    let writer = {
        let (east, topic, producing) = (s.east.clone(), topic.clone(), producing.clone());
        std::thread::spawn(move || {
            let p = producer(&east, &[]);
            for chunk in 0..(RECORDS / 5_000) {
                let records: Vec<TestRecord> = (chunk * 5_000..(chunk + 1) * 5_000)
                    .map(|i| {
                        TestRecord::kv(
                            i as i32 % PARTITIONS,
                            &i.to_string(),
                            &format!("{}:{i}:{}", i as i32 % PARTITIONS, "v".repeat(64)),
                        )
                    })
                    .collect();
                send_all(&p, &topic, &records);
                std::thread::sleep(Duration::from_millis(500));
            }
            rdkafka::producer::Producer::flush(&p, Duration::from_secs(60)).expect("source acknowledged every record");
            producing.store(false, Ordering::Relaxed);
        })
    };

    let mut first = Strait::start(&east_to_west(&topic, "offset.flush.interval.ms = 500\n"));
    assert!(
        wait_until(Duration::from_secs(120), || record_count(&s.west, &remote) >= 40_000),
        "strait did not replicate 40,000 records; log:\n{}",
        first.log_text()
    );
    first.kill9();
    let at_kill = record_count(&s.west, &remote);
    assert!(
        producing.load(Ordering::Relaxed) || at_kill < RECORDS as i64,
        "the kill must land mid-stream (target had {at_kill})"
    );

    let second = first.restart();
    writer.join().expect("writer thread");
    // Duplicates count too: a sentinel at the end of each partition, produced after every
    // record, marks where the copy is complete; a replayed record lands before it.
    let sentinels: Vec<TestRecord> =
        (0..PARTITIONS).map(|p| TestRecord::kv(p, "sentinel", &format!("{p}:sentinel"))).collect();
    produce(&s.east, &topic, &sentinels, &[]);
    let got = read_to_sentinels(&s.west, &remote, Duration::from_secs(240)).unwrap_or_else(|got| {
        panic!("only {got} records and not every sentinel arrived; restart log:\n{}", second.log_text())
    });
    let total: usize = got.iter().map(Vec::len).sum();
    assert!(total >= RECORDS, "only {total} of {RECORDS} arrived; restart log:\n{}", second.log_text());

    let mut duplicates = 0;
    for (partition, records) in got.iter().enumerate() {
        let seqs: Vec<usize> = records
            .iter()
            .map(|r| {
                let v = String::from_utf8(r.value.clone().unwrap_or_default()).unwrap_or_default();
                let mut parts = v.split(':');
                assert_eq!(parts.next(), Some(partition.to_string().as_str()), "record in the wrong partition");
                parts.next().and_then(|n| n.parse().ok()).expect("sequence number")
            })
            .collect();
        let expected: Vec<usize> = (0..RECORDS).filter(|i| *i as i32 % PARTITIONS == partition as i32).collect();
        // At-least-once with a resume: the target is runs of consecutive source records, each run
        // starting at or before the end of the one before it (a replay), never after it (a gap).
        let index_of = |seq: usize| expected.binary_search(&seq).expect("a record the source never had");
        let mut high = None::<usize>;
        let mut prev = None::<usize>;
        for &seq in &seqs {
            let i = index_of(seq);
            match prev {
                None => assert_eq!(i, 0, "partition {partition} does not start at the first record"),
                Some(p) if i == p + 1 => {}
                // Anything else must be a step back (a replay after the restart), never a skip.
                Some(p) => assert!(i <= p, "partition {partition}: gap, record {p} was followed by {i}"),
            }
            if high.is_some_and(|h| i <= h) {
                duplicates += 1;
            }
            high = Some(high.map_or(i, |h| h.max(i)));
            prev = Some(i);
        }
        assert_eq!(high, Some(expected.len() - 1), "partition {partition} misses its tail");
    }
    eprintln!("kill -9 at {at_kill} target records; {RECORDS} source records; {duplicates} duplicates on the target");
    assert_eq!(total, RECORDS + duplicates);
}

/// Reads every partition of `topic` from the start until each one's sentinel, and returns the
/// records before them per partition; `Err` with the count read when `timeout` passed first.
fn read_to_sentinels(bootstrap: &str, topic: &str, timeout: Duration) -> Result<Vec<Vec<TestRecord>>, usize> {
    use rdkafka::consumer::Consumer;
    use rdkafka::Message;
    let c = consumer(bootstrap);
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning).expect("tpl");
    }
    c.assign(&tpl).expect("assign");
    let mut out = vec![Vec::new(); PARTITIONS as usize];
    let mut done = [false; PARTITIONS as usize];
    let deadline = std::time::Instant::now() + timeout;
    while !done.iter().all(|d| *d) {
        if std::time::Instant::now() > deadline {
            return Err(out.iter().map(Vec::len).sum());
        }
        let Some(Ok(m)) = c.poll(Duration::from_millis(200)) else { continue };
        let p = m.partition() as usize;
        if m.key() == Some(&b"sentinel"[..]) {
            done[p] = true;
        } else if !done[p] {
            out[p].push(TestRecord { value: m.payload().map(<[u8]>::to_vec), ..TestRecord::kv(m.partition(), "", "") });
        }
    }
    Ok(out)
}
