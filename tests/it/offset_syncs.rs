//! Offset syncs in MM2's layout and by MM2's rules, where `offset-syncs.topic.location` says.

use std::time::Duration;

use crate::support::*;
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use strait_core::offsets::mm2::OffsetSync;

const WAIT: Duration = Duration::from_secs(90);

/// Every sync of `topic` partition 0 in the offset-syncs topic, in order.
fn syncs_of(bootstrap: &str, syncs_topic: &str, topic: &str) -> Vec<OffsetSync> {
    let c = consumer(bootstrap);
    let Ok((_, high)) = c.fetch_watermarks(syncs_topic, 0, Duration::from_secs(10)) else { return vec![] };
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(syncs_topic, 0, rdkafka::Offset::Beginning).unwrap();
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let decoded = OffsetSync::decode(m.key().unwrap_or_default(), m.payload().unwrap_or_default())
                    .expect("MM2 layout");
                if decoded.0 == (topic.to_string(), 0) {
                    out.push(decoded.1);
                }
                if m.offset() >= high - 1 {
                    break;
                }
            }
            _ if high == 0 => break,
            _ => {}
        }
    }
    out
}

#[test]
fn offset_syncs_land_on_the_source_in_mm2_layout_at_least_every_offset_lag_max_records() {
    let s = stand();
    let topic = unique("syncs");
    create_topic(&s.east, &topic, 1, 1, &[]);
    let sent: Vec<TestRecord> = (0..450).map(|i| TestRecord::kv(0, "k", &i.to_string())).collect();
    produce(&s.east, &topic, &sent, &[]);
    let strait = Strait::start(&east_to_west(&topic, ""));
    assert!(
        wait_until(WAIT, || record_count(&s.west, &format!("us-east.{topic}")) == 450),
        "log:\n{}",
        strait.log_text()
    );
    let mut syncs = Vec::new();
    let caught_up = wait_until(Duration::from_secs(30), || {
        syncs = syncs_of(&s.east, "mm2-offset-syncs.us-west.internal", &topic);
        syncs.last().is_some_and(|last| last.upstream >= 449 - 100)
    });
    assert!(caught_up, "no sync within offset.lag.max of the last record: {syncs:?}\nlog:\n{}", strait.log_text());
    assert_eq!(
        syncs.first(),
        Some(&OffsetSync { upstream: 0, downstream: 0 }),
        "the first record is synced: {syncs:?}"
    );
    for pair in syncs.windows(2) {
        assert!(pair[1].downstream - pair[0].downstream <= 101, "syncs more than offset.lag.max apart: {syncs:?}");
        assert_eq!(
            pair[1].upstream - pair[0].upstream,
            pair[1].downstream - pair[0].downstream,
            "a 1:1 mirror: {syncs:?}"
        );
    }
    assert!(syncs.len() >= 4 && syncs.len() <= 10, "about one sync per 100 records, got {}: {syncs:?}", syncs.len());
}

#[test]
fn offset_syncs_can_live_on_the_target_or_be_turned_off() {
    let s = stand();
    let topic = unique("syncs-target");
    create_topic(&s.east, &topic, 1, 1, &[]);
    produce(&s.east, &topic, &[TestRecord::kv(0, "k", "v")], &[]);
    let strait = Strait::start(&east_to_west(&topic, "offset-syncs.topic.location = target\n"));
    let mut syncs = Vec::new();
    assert!(
        wait_until(WAIT, || {
            syncs = syncs_of(&s.west, "mm2-offset-syncs.us-east.internal", &topic);
            !syncs.is_empty()
        }),
        "log:\n{}",
        strait.log_text()
    );
    assert_eq!(syncs[0], OffsetSync { upstream: 0, downstream: 0 });
    drop(strait);

    // A target alias of its own, so the absent topic is this flow's alone.
    let alias = unique("quiet").replace('-', "");
    let config = format!(
        "clusters = us-east, {alias}\nus-east.bootstrap.servers = {}\n{alias}.bootstrap.servers = {}\nus-east->{alias}.enabled = true\nus-east->{alias}.topics = {topic}\nemit.offset-syncs.enabled = false\n",
        s.east, s.west
    );
    let quiet = Strait::start(&config);
    // A flow creates its offset-syncs topic while it is wired, before its first fetch: the
    // replicated record is the signal that the topic would exist by now.
    assert_eq!(read_all(&s.west, &format!("us-east.{topic}"), 1, WAIT)[0].len(), 1, "log:\n{}", quiet.log_text());
    assert!(
        !topic_names(&s.east).contains(&format!("mm2-offset-syncs.{alias}.internal")),
        "log:\n{}",
        quiet.log_text()
    );
}
