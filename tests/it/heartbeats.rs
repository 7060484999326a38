//! Heartbeats in MM2's layout on the target, replicated onward as `<alias>.heartbeats`.

use std::time::Duration;

use crate::support::*;
use strait_core::offsets::mm2::Heartbeat;

#[test]
fn heartbeats_reach_the_target_every_second_and_travel_onward_as_alias_heartbeats() {
    let s = stand();
    // Both directions, each mirroring only the other's heartbeats topic.
    let config = format!(
        "clusters = us-east, us-west\nus-east.bootstrap.servers = {}\nus-west.bootstrap.servers = {}\nus-east->us-west.enabled = true\nus-west->us-east.enabled = true\ntopics = heartbeats\nreplication.factor = 1\nrefresh.topics.interval.seconds = 1\n",
        s.east, s.west
    );
    let strait = Strait::start(&config);
    let fresh =
        |b: &Option<Heartbeat>| b.as_ref().is_some_and(|b| strait_core::clock::now_millis() - b.timestamp < 10_000);
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
