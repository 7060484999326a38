//! Heartbeats in MM2's layout on the target, replicated onward as `<alias>.heartbeats`.

mod support;

use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use strait_core::offsets::mm2::Heartbeat;
use support::*;

/// The newest heartbeat of `source->target` in `topic` on `bootstrap`.
fn newest_heartbeat(bootstrap: &str, topic: &str, source: &str, target: &str) -> Option<Heartbeat> {
    let c = consumer(bootstrap);
    let (_, high) = c.fetch_watermarks(topic, 0, Duration::from_secs(10)).ok()?;
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Offset((high - 500).max(0))).ok()?;
    c.assign(&tpl).ok()?;
    let mut newest = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        let Some(Ok(m)) = c.poll(Duration::from_millis(200)) else { continue };
        let beat = Heartbeat::decode(m.key().unwrap_or_default(), m.payload().unwrap_or_default()).expect("MM2 layout");
        if beat.source == source && beat.target == target {
            newest = Some(beat);
        }
        if m.offset() >= high - 1 {
            break;
        }
    }
    newest
}

#[test]
fn heartbeats_reach_the_target_every_second_and_travel_onward_as_alias_heartbeats() {
    let s = stand();
    // Both directions, each mirroring only the other's heartbeats topic.
    let config = format!(
        "clusters = us-east, us-west\nus-east.bootstrap.servers = {}\nus-west.bootstrap.servers = {}\nus-east->us-west.enabled = true\nus-west->us-east.enabled = true\ntopics = heartbeats\nreplication.factor = 1\nrefresh.topics.interval.seconds = 1\n",
        s.east, s.west
    );
    let strait = Strait::start(&config);
    let fresh = |b: &Option<Heartbeat>| b.as_ref().is_some_and(|b| strait_core::pipeline::now_millis() - b.timestamp < 10_000);
    let mut on_west = None;
    assert!(
        wait_until(Duration::from_secs(60), || {
            on_west = newest_heartbeat(&s.west, "heartbeats", "us-east", "us-west");
            fresh(&on_west)
        }),
        "no recent us-east->us-west heartbeat on us-west ({on_west:?}); log:\n{}",
        strait.log_text()
    );
    // us-east's own heartbeats topic (written by us-west->us-east) arrives on us-west renamed.
    let mut onward = None;
    assert!(
        wait_until(Duration::from_secs(60), || {
            onward = newest_heartbeat(&s.west, "us-east.heartbeats", "us-west", "us-east");
            fresh(&onward)
        }),
        "us-east.heartbeats on us-west has no recent us-west->us-east beat ({onward:?}); log:\n{}",
        strait.log_text()
    );
}
