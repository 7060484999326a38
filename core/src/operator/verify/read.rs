//! Reading one partition's offset range for `strait verify`, `read_committed`, at a bounded
//! rate, and the digests both sides are compared by.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Headers as _, Message};
use rdkafka::{Offset, TopicPartitionList};

use crate::active_active::provenance;
use crate::cluster::ClusterError;

/// How long a read may go without a record or a step forward before it gives up.
const STALL: Duration = Duration::from_secs(30);

/// Holds reads to `bytes_per_second` over the whole verification, both clusters together.
#[derive(Debug)]
pub struct Throttle {
    bytes_per_second: Option<u64>,
    started: Instant,
    bytes: u64,
}

impl Throttle {
    /// A throttle that lets `bytes_per_second` through (`None`: no limit).
    pub fn new(bytes_per_second: Option<u64>) -> Self {
        Self { bytes_per_second: bytes_per_second.filter(|&b| b > 0), started: Instant::now(), bytes: 0 }
    }

    /// Counts `bytes` read, and sleeps while the reads are ahead of the rate.
    pub fn took(&mut self, bytes: usize) {
        self.bytes += bytes as u64;
        if let Some(rate) = self.bytes_per_second {
            let due = Duration::from_secs_f64(self.bytes as f64 / rate as f64);
            if let Some(ahead) = due.checked_sub(self.started.elapsed()) {
                std::thread::sleep(ahead);
            }
        }
    }

    /// Bytes read so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// The content a record is compared by, without strait's own provenance header (a copy gains
/// it by design). When the flow carries schema ids, the four id bytes after a leading zero
/// byte are left out: the target's registry numbers the same schema differently.
#[derive(Debug, Clone, Copy, Default)]
pub struct Content<'a> {
    /// Key; `None` for a null key.
    pub key: Option<&'a [u8]>,
    /// Value; `None` for a tombstone.
    pub value: Option<&'a [u8]>,
    /// Timestamp in milliseconds.
    pub timestamp: i64,
}

/// Digests of a record's content and of its key alone, from its parts and its headers in order.
pub fn digests<'h>(
    content: Content<'_>,
    headers: impl IntoIterator<Item = (&'h [u8], Option<&'h [u8]>)>,
    schema_ids: bool,
) -> (u64, u64) {
    let mut key = DefaultHasher::new();
    content.key.hash(&mut key);
    let key = key.finish();
    let mut all = DefaultHasher::new();
    key.hash(&mut all);
    match content.value {
        Some(v) if schema_ids && v.len() >= 5 && v[0] == 0 => {
            Some((&v[..1], &v[5..])).hash(&mut all);
        }
        v => v.map(|v| (v, &[][..] as &[u8])).hash(&mut all),
    }
    content.timestamp.hash(&mut all);
    for (k, v) in headers.into_iter().filter(|(k, _)| *k != provenance::HEADER.as_bytes()) {
        (k, v).hash(&mut all);
    }
    (all.finish(), key)
}

/// The headers of a message read from a cluster, in order.
pub fn message_headers<'m>(m: &'m BorrowedMessage<'_>) -> Vec<(&'m [u8], Option<&'m [u8]>)> {
    m.headers().map(|h| h.iter().map(|h| (h.key.as_bytes(), h.value)).collect()).unwrap_or_default()
}

/// Reads `[from, until)` of one partition through `consumer`, handing each record to `each`.
/// Offsets with no record (transaction markers, aborted or compacted records) are passed over.
pub fn read_range(
    consumer: &BaseConsumer,
    alias: &str,
    topic: &str,
    partition: i32,
    (from, until): (i64, i64),
    throttle: &mut Throttle,
    mut each: impl FnMut(&BorrowedMessage<'_>),
) -> Result<(), ClusterError> {
    if from >= until {
        return Ok(());
    }
    let fail = |what: &str, reason: String| ClusterError::Client {
        alias: alias.to_string(),
        what: format!("{what} {topic}-{partition}"),
        reason,
    };
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(from)).map_err(|e| fail("assigning", e.to_string()))?;
    consumer.assign(&tpl).map_err(|e| fail("assigning", e.to_string()))?;
    let mut last_step = Instant::now();
    let mut reached = from;
    loop {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                if m.offset() >= until {
                    break;
                }
                throttle.took(m.key_len() + m.payload_len());
                reached = m.offset() + 1;
                last_step = Instant::now();
                each(&m);
                if reached >= until {
                    break;
                }
            }
            Some(Err(e)) => return Err(fail("reading", e.to_string())),
            None => {
                // Past the last record there may be only markers: the position says we are done.
                let position = consumer
                    .position()
                    .ok()
                    .and_then(|p| p.find_partition(topic, partition).and_then(|e| e.offset().to_raw()));
                if let Some(p) = position.filter(|&p| p > reached) {
                    reached = p;
                    last_step = Instant::now();
                }
                if reached >= until {
                    break;
                }
                if last_step.elapsed() > STALL {
                    return Err(fail(
                        "reading",
                        format!(
                            "stopped at offset {reached} of {until} for {}s; check that the cluster answers and the \
                             records up to {until} are still there",
                            STALL.as_secs()
                        ),
                    ));
                }
            }
        }
    }
    consumer.unassign().map_err(|e| fail("unassigning", e.to_string()))?;
    Ok(())
}
