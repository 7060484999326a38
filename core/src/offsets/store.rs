//! Where acknowledged positions live: a compacted topic on the target (the flow's
//! `offset.storage.topic`, `strait-offsets.<source>.internal` by default), one record per
//! source partition.
//!
//! Keeping them on the target (as MM2 keeps its Connect offsets) means a later exactly-once mode
//! can write a position in the same producer transaction as the records it covers.
//! Key: topic STRING, partition INT32. Value: version INT16, next offset INT64, and from
//! version 1 the open run of the offset mapping (upstream, downstream, length; INT64 each).
//! Closed runs share the topic under a longer key (see [`encode_run_key`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::runs::{PartitionMap, Run};
use super::wire::{put_i16, put_i64, Reader};
use crate::cluster::{create_client, ClusterAdmin, ClusterError, TopicSpec, ASSIGN_ONLY_CONSUMER};
use crate::config::{ClientSettings, ClusterConfig};
use crate::record::{SourceOffset, TargetOffset};

/// Where a source partition resumes, and the run of the offset mapping still growing there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// The next source offset to fetch.
    pub next: SourceOffset,
    /// The open run of the mapping, when a record of this partition was replicated.
    pub open: Option<Run>,
}

/// Source positions by (source topic, partition).
pub type Positions = HashMap<(String, i32), Stored>;

/// The spec strait creates the position topic with. Every flush writes a position record and
/// every run break a run record, so without compaction a flow's start-up would read its whole
/// history: segments roll within an hour (or at 16 MiB) so the cleaner can reach them, and
/// tombstones of deleted runs go an hour after cleaning, not the broker's day.
pub fn positions_topic_spec(topic: &str, replication_factor: i32) -> TopicSpec {
    let mut spec = TopicSpec::compacted_single(topic.to_string(), replication_factor);
    spec.configs.extend(POSITIONS_TOPIC_CONFIGS.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    spec
}

/// Topic configs of the position topic beyond `cleanup.policy=compact`.
pub const POSITIONS_TOPIC_CONFIGS: [(&str, &str); 3] =
    [("segment.ms", "3600000"), ("segment.bytes", "16777216"), ("delete.retention.ms", "3600000")];

/// Encodes the key of a position record.
pub use super::wire::topic_partition_key as encode_key;

/// Encodes the value of a position record: version 0 carries the next offset only, version 1
/// adds the open run.
pub fn encode_value(stored: Stored) -> Vec<u8> {
    let mut out = Vec::with_capacity(34);
    put_i16(&mut out, i16::from(stored.open.is_some()));
    put_i64(&mut out, stored.next.get());
    if let Some(run) = stored.open {
        put_i64(&mut out, run.upstream.get());
        put_i64(&mut out, run.downstream.get());
        put_i64(&mut out, run.len);
    }
    out
}

/// Encodes the key of a closed run: the partition's key plus the run's first source offset,
/// so every run survives compaction until it is deleted.
pub fn encode_run_key(topic: &str, partition: i32, upstream: SourceOffset) -> Vec<u8> {
    let mut out = encode_key(topic, partition);
    put_i64(&mut out, upstream.get());
    out
}

/// Encodes the value of a closed run: version INT16 = 0, downstream INT64, length INT64.
pub fn encode_run_value(run: Run) -> Vec<u8> {
    let mut out = Vec::with_capacity(18);
    put_i16(&mut out, 0);
    put_i64(&mut out, run.downstream.get());
    put_i64(&mut out, run.len);
    out
}

/// One record of the position topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredRecord {
    /// Where a partition resumes.
    Position((String, i32), Stored),
    /// A closed run of a partition's mapping.
    Run((String, i32), Run),
    /// A closed run was deleted (a tombstone), by its first source offset.
    RunDeleted((String, i32), SourceOffset),
    /// A partition's position was deleted (a tombstone): its source topic was deleted.
    PositionDeleted((String, i32)),
}

/// Decodes a record of the position topic; `None` for records of another layout.
pub fn decode(key: &[u8], value: Option<&[u8]>) -> Option<StoredRecord> {
    let mut k = Reader::new(key);
    let id = (k.string()?, k.i32()?);
    let run_start = k.i64().map(SourceOffset);
    let mut v = Reader::new(value.unwrap_or_default());
    match (run_start, value) {
        (None, Some(_)) => {
            let version = v.i16()?;
            let next = SourceOffset(v.i64()?);
            let open = match version {
                0 => None,
                1 => Some(Run { upstream: SourceOffset(v.i64()?), downstream: TargetOffset(v.i64()?), len: v.i64()? }),
                _ => return None,
            };
            Some(StoredRecord::Position(id, Stored { next, open }))
        }
        (Some(upstream), Some(_)) => {
            (v.i16()? == 0).then_some(())?;
            Some(StoredRecord::Run(id, Run { upstream, downstream: TargetOffset(v.i64()?), len: v.i64()? }))
        }
        (Some(upstream), None) => Some(StoredRecord::RunDeleted(id, upstream)),
        (None, None) => Some(StoredRecord::PositionDeleted(id)),
    }
}

/// Every partition's mapping, from the position topic of one flow.
#[derive(Debug, Clone, Default)]
pub struct Mappings {
    /// By source (topic, partition).
    pub partitions: HashMap<(String, i32), PartitionMap>,
    /// Runs of partitions whose position was deleted (their source topic is gone), by first
    /// source offset: their records are still in the topic, and tombstones are due. A run
    /// record or tombstone read later under the same key settles it: a recreated topic's run
    /// must not be deleted, and a deleted one needs no second tombstone.
    pub orphaned: HashSet<((String, i32), SourceOffset)>,
}

impl Mappings {
    /// Applies one record of the position topic.
    pub fn apply(&mut self, key: &[u8], value: Option<&[u8]>) {
        match decode(key, value) {
            Some(StoredRecord::Position(id, stored)) => {
                let map = self.partitions.entry(id).or_default();
                match stored.open {
                    Some(run) => map.open(run, stored.next),
                    None => map.set_next(stored.next),
                }
            }
            Some(StoredRecord::Run(id, run)) => {
                if !self.orphaned.is_empty() {
                    self.orphaned.remove(&(id.clone(), run.upstream));
                }
                self.partitions.entry(id).or_default().closed(run)
            }
            Some(StoredRecord::RunDeleted(id, upstream)) => match self.partitions.get_mut(&id) {
                Some(map) => map.forget(upstream),
                None => {
                    self.orphaned.remove(&(id, upstream));
                }
            },
            Some(StoredRecord::PositionDeleted(id)) => {
                if let Some(map) = self.partitions.remove(&id) {
                    self.orphaned.extend(map.runs().map(|run| (id.clone(), run.upstream)));
                }
            }
            None => {}
        }
    }

    /// The mapping of one source partition.
    pub fn get(&self, topic: &str, partition: i32) -> Option<&PartitionMap> {
        self.partitions.get(&(topic.to_string(), partition))
    }
}

/// Reads every position stored in the position topic `topic`, creating it if needed.
pub fn load_positions(
    target: &ClusterConfig,
    settings: &ClientSettings,
    admin: &ClusterAdmin,
    topic: &str,
    replication_factor: i32,
    timeout: Duration,
) -> Result<Positions, ClusterError> {
    let spec = positions_topic_spec(topic, replication_factor);
    admin.ensure_exists(&spec)?;
    let mut positions = Positions::new();
    read_topic(target, settings, &spec.name, timeout, |k, v| match decode(k, v) {
        Some(StoredRecord::Position(id, stored)) => {
            positions.insert(id, stored);
        }
        Some(StoredRecord::PositionDeleted(id)) => {
            positions.remove(&id);
        }
        _ => {}
    })?;
    Ok(positions)
}

/// Reads partition 0 of a single-partition internal topic from its beginning to its current
/// end, handing every record's key and value (`None` for a tombstone) to `on_record`.
pub fn read_topic(
    cluster: &ClusterConfig,
    settings: &ClientSettings,
    topic: &str,
    timeout: Duration,
    on_record: impl FnMut(&[u8], Option<&[u8]>),
) -> Result<(), ClusterError> {
    TopicTail::open(cluster, settings, topic)?.catch_up(timeout, on_record)
}

/// A client that finds where internal topics on `cluster` end: the end of the log itself (past
/// open transactions), not the last stable offset. It never fetches, so any number of
/// [`TopicTail`]s of one cluster can share it.
pub fn end_reader(cluster: &ClusterConfig, settings: &ClientSettings) -> Result<BaseConsumer, ClusterError> {
    create_client(
        cluster,
        settings,
        "consumer",
        &[],
        &[ASSIGN_ONLY_CONSUMER, &[("isolation.level", "read_uncommitted")]].concat(),
        rdkafka::consumer::DefaultConsumerContext,
    )
}

/// A `read_committed` client that [`TopicTail`]s of one cluster take turns with: each assigns
/// its own partition for a read and unassigns it after, so between reads nothing is fetched.
pub fn tail_reader(cluster: &ClusterConfig, settings: &ClientSettings) -> Result<Mutex<BaseConsumer>, ClusterError> {
    create_client(cluster, settings, "consumer", &[], ASSIGN_ONLY_CONSUMER, rdkafka::consumer::DefaultConsumerContext)
        .map(Mutex::new)
}

/// Follows partition 0 of a single-partition internal topic: each [`TopicTail::catch_up`] reads
/// what was appended since the last one, `read_committed`.
pub struct TopicTail {
    /// Reads the records; shared with other tails of the cluster ([`tail_reader`]). A tail that
    /// kept a client of its own assigned would fetch every `fetch.wait.max.ms` between reads,
    /// and buffer what arrives: each flow's checkpoint round reads one every minute.
    reader: Arc<Mutex<BaseConsumer>>,
    /// Finds the topic's end. A `read_committed` client would be told the last stable offset,
    /// which stops short of every record written after a transaction still open (one a killed
    /// process left, say): reading only to there would miss newer committed positions. It only
    /// asks for watermarks, so one serves every reader of a cluster ([`end_reader`]).
    ends: Arc<BaseConsumer>,
    topic: String,
    alias: String,
    /// Where the next read starts; `None` until the first read, which starts at the beginning.
    next: Option<i64>,
    /// Set when the reader's flow stops: the read in progress gives up.
    abandon: Option<Arc<AtomicBool>>,
}

impl TopicTail {
    /// A reader at the beginning of `topic` on `cluster`, with clients of its own.
    pub fn open(cluster: &ClusterConfig, settings: &ClientSettings, topic: &str) -> Result<Self, ClusterError> {
        let reader = Arc::new(tail_reader(cluster, settings)?);
        Ok(Self::shared(cluster, topic, reader, Arc::new(end_reader(cluster, settings)?)))
    }

    /// A reader at the beginning of `topic` on `cluster` that reads through `reader` (a
    /// [`tail_reader`]) and finds the topic's end through `ends` (an [`end_reader`]), both of
    /// that cluster and shared with other tails.
    pub fn shared(
        cluster: &ClusterConfig,
        topic: &str,
        reader: Arc<Mutex<BaseConsumer>>,
        ends: Arc<BaseConsumer>,
    ) -> Self {
        Self { reader, ends, topic: topic.to_string(), alias: cluster.alias.to_string(), next: None, abandon: None }
    }

    /// Makes every read give up once `flag` is set (its flow stopping). A transaction a killed
    /// process left open holds a read back until the transaction times out, and the flow that
    /// must take over that process's tasks, which aborts the transaction at once, would
    /// otherwise wait for the read before it can stop and start again.
    pub fn abandon_when(mut self, flag: Option<Arc<AtomicBool>>) -> Self {
        self.abandon = flag;
        self
    }

    /// The topic read.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Reads from where the last call stopped to the topic's current end; records of a
    /// transaction still open there are waited for (until `timeout`), never skipped.
    pub fn catch_up(
        &mut self,
        timeout: Duration,
        on_record: impl FnMut(&[u8], Option<&[u8]>),
    ) -> Result<(), ClusterError> {
        let topic = self.topic.as_str();
        let fail = |what: &str, reason: String| read_error(&self.alias, topic, what, reason);
        let deadline = Instant::now() + timeout;
        // A just-created topic may need a moment before its leader answers.
        let (low, high) = loop {
            match self.ends.fetch_watermarks(topic, 0, Duration::from_secs(5)) {
                Ok(w) => break w,
                Err(e) if Instant::now() > deadline => return Err(fail("finding the end of", e.to_string())),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        };
        if high <= low || self.next.is_some_and(|next| next >= high) {
            return Ok(());
        }
        let reader = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        let start = match self.next {
            Some(next) => Offset::Offset(next),
            None => {
                // Without a known leader librdkafka backs a first fetch off by a fixed 500 ms;
                // asking for the topic's metadata first lets it start at once.
                let _ = reader.fetch_metadata(Some(topic), Duration::from_secs(5));
                Offset::Beginning
            }
        };
        let mut partition = TopicPartitionList::new();
        partition.add_partition_offset(topic, 0, start).map_err(|e| fail("assigning", e.to_string()))?;
        reader.assign(&partition).map_err(|e| fail("assigning", e.to_string()))?;
        let read = read_to(&reader, topic, high, (deadline, timeout), &self.abandon, &mut self.next, on_record)
            .map_err(|(what, reason)| fail(what, reason));
        let unassigned = reader.unassign().map_err(|e| fail("unassigning", e.to_string()));
        read.and(unassigned)
    }
}

/// Where `reader` stands in partition 0 of `topic`, once it read from it.
fn position(reader: &BaseConsumer, topic: &str) -> Option<i64> {
    reader.position().ok().and_then(|p| p.find_partition(topic, 0).and_then(|e| e.offset().to_raw()))
}

/// Polls `reader` (assigned partition 0 of `topic`) until its position reaches `high`, giving up
/// at `deadline` (`timeout` after the read began); an error says what failed and why. `next`
/// follows what was handed to `on_record`, so a read given up midway goes on from there.
fn read_to(
    reader: &BaseConsumer,
    topic: &str,
    high: i64,
    (deadline, timeout): (Instant, Duration),
    abandon: &Option<Arc<AtomicBool>>,
    next: &mut Option<i64>,
    mut on_record: impl FnMut(&[u8], Option<&[u8]>),
) -> Result<(), (&'static str, String)> {
    // Just after the assign the reader may still show where another tail of the same topic
    // stopped: librdkafka clears that once the other tail's fetch has stopped. The position
    // counts once it moved; until then only messages do.
    let left = position(reader, topic);
    let mut moved = false;
    loop {
        if Instant::now() > deadline {
            let stable = reader.fetch_watermarks(topic, 0, Duration::from_secs(2)).ok().map(|(_, stable)| stable);
            return Err(("reading", unfinished(timeout, topic, *next, high, stable)));
        }
        if abandon.as_ref().is_some_and(|f| f.load(Ordering::Relaxed)) {
            return Err(("reading", "given up: the flow is stopping".into()));
        }
        match reader.poll(Duration::from_millis(200)) {
            // A message fetched for the reader's previous tail, before it was unassigned.
            Some(Ok(m)) if m.topic() != topic => {}
            Some(Ok(m)) => {
                if let Some(k) = m.key() {
                    on_record(k, m.payload());
                }
                *next = Some(m.offset() + 1);
                if m.offset() >= high - 1 {
                    return Ok(());
                }
            }
            Some(Err(e)) => return Err(("reading", e.to_string())),
            None => {
                // Transaction markers move the position without a message.
                let now = position(reader, topic);
                moved |= now != left;
                match now {
                    Some(p) if moved && p >= next.unwrap_or(0) => {
                        *next = Some(p);
                        if p >= high {
                            return Ok(());
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Why a read did not reach `high` within `timeout`: where it stood (`next`, `None` before its
/// first record) and, when it stood at the last stable offset (`stable`, what a `read_committed`
/// client is told the end is) and that stops short of `high`, the transaction that holds it there
/// and how an operator ends one the cluster left hanging (a read short of `stable` was slow, not
/// held). A coordinator that finds no leader for a partition when it aborts a timed-out
/// transaction (a single broker its controller fenced after a pause) skips that partition's
/// marker, and the transaction stays open there for good.
fn unfinished(timeout: Duration, topic: &str, next: Option<i64>, high: i64, stable: Option<i64>) -> String {
    let stood = match next {
        Some(next) => format!("stopped at offset {next}, short of the end at {high}"),
        None => format!("stopped before its first record, short of the end at {high}"),
    };
    let held = match stable {
        Some(stable) if stable < high && next.unwrap_or(0) >= stable => format!(
            "; a transaction open at offset {stable} holds `read_committed` readers there: if it outlives its \
             producer's transaction.timeout.ms, the cluster left it hanging; end it with `kafka-transactions.sh \
             --bootstrap-server <servers> abort --topic {topic} --partition 0 --start-offset {stable}`"
        ),
        _ => String::new(),
    };
    format!("not done within {}s: {stood}{held}", timeout.as_secs())
}

fn read_error(alias: &str, topic: &str, what: &str, reason: String) -> ClusterError {
    ClusterError::Client { alias: alias.to_string(), what: format!("{what} {topic}"), reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(upstream: i64, downstream: i64, len: i64) -> Run {
        Run { upstream: SourceOffset(upstream), downstream: TargetOffset(downstream), len }
    }

    #[test]
    fn a_read_that_timed_out_says_where_it_stood_and_names_the_transaction_that_held_it() {
        let t = Duration::from_secs(60);
        let held = unfinished(t, "strait-offsets.a.internal", Some(120), 180, Some(120));
        assert!(
            held.starts_with(
                "not done within 60s: stopped at offset 120, short of the end at 180; a transaction open at offset 120"
            ),
            "{held}"
        );
        assert!(held.ends_with("abort --topic strait-offsets.a.internal --partition 0 --start-offset 120`"), "{held}");
        assert_eq!(
            unfinished(t, "p", None, 5, Some(5)),
            "not done within 60s: stopped before its first record, short of the end at 5"
        );
        assert_eq!(
            unfinished(t, "p", Some(3), 5, None),
            "not done within 60s: stopped at offset 3, short of the end at 5"
        );
        assert_eq!(
            unfinished(t, "p", Some(3), 9, Some(5)),
            "not done within 60s: stopped at offset 3, short of the end at 9",
            "a read short of the last stable offset was slow, not held"
        );
    }

    #[test]
    fn position_and_run_records_round_trip() {
        let id = ("orders".to_string(), 2);
        let key = encode_key("orders", 2);
        let plain = Stored { next: SourceOffset(12345), open: None };
        assert_eq!(decode(&key, Some(&encode_value(plain))), Some(StoredRecord::Position(id.clone(), plain)));
        let with_run = Stored { next: SourceOffset(12345), open: Some(run(100, 7, 12000)) };
        assert_eq!(decode(&key, Some(&encode_value(with_run))), Some(StoredRecord::Position(id.clone(), with_run)));
        assert_eq!(decode(&key, Some(&[0, 1, 0])), None);
        let run = run(5, 0, 95);
        let run_key = encode_run_key("orders", 2, SourceOffset(5));
        assert_eq!(decode(&run_key, Some(&encode_run_value(run))), Some(StoredRecord::Run(id.clone(), run)));
        assert_eq!(decode(&run_key, None), Some(StoredRecord::RunDeleted(id.clone(), SourceOffset(5))));
        assert_eq!(decode(&key, None), Some(StoredRecord::PositionDeleted(id)), "a deleted source topic's position");
    }

    #[test]
    fn a_deleted_partition_leaves_its_runs_to_be_tombstoned_and_deleted_runs_are_forgotten() {
        let id = ("orders".to_string(), 0);
        let mut m = Mappings::default();
        for upstream in [0, 10, 20] {
            m.apply(
                &encode_run_key("orders", 0, SourceOffset(upstream)),
                Some(&encode_run_value(run(upstream, upstream / 10 * 9, 9))),
            );
        }
        m.apply(
            &encode_key("orders", 0),
            Some(&encode_value(Stored { next: SourceOffset(35), open: Some(run(30, 27, 5)) })),
        );
        m.apply(&encode_run_key("orders", 0, SourceOffset(10)), None);
        let starts: Vec<SourceOffset> =
            m.get("orders", 0).map(|p| p.runs().map(|r| r.upstream).collect()).unwrap_or_default();
        assert_eq!(starts, [0, 20, 30].map(SourceOffset));
        m.apply(&encode_key("orders", 0), None);
        assert!(m.get("orders", 0).is_none());
        assert_eq!(
            m.orphaned,
            HashSet::from([
                (id.clone(), SourceOffset(0)),
                (id.clone(), SourceOffset(20)),
                (id.clone(), SourceOffset(30))
            ])
        );
        m.apply(&encode_run_key("orders", 0, SourceOffset(20)), None);
        m.apply(&encode_run_key("orders", 0, SourceOffset(0)), Some(&encode_run_value(run(0, 0, 3))));
        assert_eq!(
            m.orphaned,
            HashSet::from([(id, SourceOffset(30))]),
            "deleted already, and a recreated topic's run: neither is due"
        );
    }
}
