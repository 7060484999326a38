//! The flow's producers on the target.
//!
//! At-least-once, a flow has one idempotent producer for records (its positions go through the
//! fenced [`super::positions`] writer). Exactly-once, it has one transactional
//! producer per task it owns, each with the task's own `transactional.id`: whichever process
//! owns the task next calls `init_transactions` with the same id, which fences this producer
//! (its next write or commit fails) and makes the coordinator abort what it left open. One
//! producer for all of a process's tasks could not be fenced task by task when the group moves
//! only some of them.

use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::types::RDKafkaErrorCode;

use super::delivery::DeliveryContext;
use crate::cluster::poll_producer;
use crate::delivery::Abort;

/// A producer on the target that reports to the flow's deliveries.
pub type TargetProducer = BaseProducer<DeliveryContext>;

/// The `transactional.id` of task `task` of the flow whose group is `group` (see
/// [`crate::group::group_id`]), split into `tasks` tasks. The group names the flow by its
/// position topic, as its positions are keyed, so every process that stores positions there
/// fences every other; the task count is part of it because a task's partitions depend on it.
///
/// ```
/// let id = strait_core::pipeline::transactional_id("strait.us-east->us-west.00ff", 12, 3);
/// assert_eq!(id, "strait.us-east->us-west.00ff.12.3");
/// ```
pub fn transactional_id(group: &str, tasks: u32, task: u32) -> String {
    format!("{group}.{tasks}.{task}")
}

struct Lane {
    producer: TargetProducer,
    /// Exactly-once: the task whose partitions this producer writes.
    task: u32,
    /// Exactly-once: whether this lane's part of the current commit, or abort, is done.
    ended: bool,
    /// Exactly-once: a commit did not end within [`COMMIT_CALL_WAIT`]; whether it committed is
    /// unknown until the task's next owner initialises its id.
    in_doubt: bool,
}

/// One producer, or one per owned task.
pub struct Lanes {
    lanes: Vec<Lane>,
    /// Exactly-once: `tasks.max`, which maps a source partition to its task.
    tasks: Option<u32>,
    /// Exactly-once: what the first lane that could not abort said, while others still abort.
    abort_failure: Option<String>,
}

impl Lanes {
    /// At-least-once: every record goes through `producer`.
    pub fn single(producer: TargetProducer) -> Self {
        Self {
            lanes: vec![Lane { producer, task: 0, ended: false, in_doubt: false }],
            tasks: None,
            abort_failure: None,
        }
    }

    /// Exactly-once: one transactional producer per owned task, each already past
    /// `init_transactions`.
    pub fn transactional(producers: Vec<(u32, TargetProducer)>, tasks: u32) -> Self {
        let lanes = producers
            .into_iter()
            .map(|(task, producer)| Lane { producer, task, ended: false, in_doubt: false })
            .collect();
        Self { lanes, tasks: Some(tasks.max(1)), abort_failure: None }
    }

    /// Whether records and positions are written in transactions.
    pub fn transactional_mode(&self) -> bool {
        self.tasks.is_some()
    }

    /// The lane that writes source partition `partition`'s records and positions; `None` when
    /// this process owns no task for it.
    pub fn lane_of(&self, partition: i32) -> Option<usize> {
        match self.tasks {
            None => Some(0),
            Some(count) => {
                let task = partition.rem_euclid(count as i32) as u32;
                self.lanes.iter().position(|l| l.task == task)
            }
        }
    }

    /// The producer of lane `lane` (from [`Lanes::lane_of`]).
    pub fn producer(&self, lane: usize) -> &TargetProducer {
        &self.lanes[lane.min(self.lanes.len() - 1)].producer
    }

    /// Serves delivery reports of every lane, waiting up to `timeout` on the first.
    pub fn poll(&self, timeout: Duration) {
        for (i, lane) in self.lanes.iter().enumerate() {
            poll_producer(&lane.producer, if i == 0 { timeout } else { Duration::ZERO });
        }
    }

    /// Records and position writes not yet acknowledged, over every lane.
    pub fn in_flight(&self) -> i32 {
        self.lanes.iter().map(|l| l.producer.in_flight_count()).sum()
    }

    /// Exactly-once: opens a transaction on every lane.
    pub fn begin(&mut self) -> Result<(), KafkaError> {
        for lane in &mut self.lanes {
            lane.producer.begin_transaction()?;
            lane.ended = false;
            lane.in_doubt = false;
        }
        Ok(())
    }

    /// Exactly-once: commits every lane's open transaction, all lanes at once, each call waiting
    /// until the coordinator answered (at most [`COMMIT_CALL_WAIT`], whatever `_wait` asks):
    /// `Ok(true)` once all are committed. A commit is never resumed in short steps: librdkafka
    /// 2.12 forgets which call it is serving when a resumed `commit_transaction` times out
    /// before reaching its main thread, and then takes the commit's answer for an abort's and
    /// aborts the process (`rd_kafka_txn_set_state` "Invalid transaction state transition",
    /// seen under load). Call only when nothing is in flight, so a commit waits for the
    /// coordinator's answer alone, one round trip. A commit that fails or times out leaves its
    /// lane in doubt: it is never aborted (an abort while its answer may still come is the
    /// same fault), the flow stops, and the task's next owner settles the transaction.
    pub fn commit(&mut self, _wait: Duration) -> Result<bool, KafkaError> {
        let results: Vec<(usize, Result<(), KafkaError>)> = std::thread::scope(|scope| {
            let running: Vec<_> = self
                .lanes
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.ended)
                .map(|(i, l)| (i, scope.spawn(move || l.producer.commit_transaction(COMMIT_CALL_WAIT))))
                .collect();
            running.into_iter().map(|(i, h)| (i, h.join().unwrap_or(Err(KafkaError::Canceled)))).collect()
        });
        let mut failed = None;
        for (i, result) in results {
            let lane = &mut self.lanes[i];
            match result {
                Ok(()) => lane.ended = true,
                Err(e) => {
                    lane.in_doubt = true;
                    failed.get_or_insert(e);
                }
            }
        }
        failed.map_or(Ok(true), Err)
    }
}

impl Lanes {
    /// Exactly-once: aborts every lane's open transaction, waiting at most `wait` per lane, so
    /// that `read_committed` readers of the target need not wait out `transaction.timeout.ms`.
    /// Call again while it answers [`Abort::Pending`]: librdkafka resumes a timed-out abort. A
    /// lane whose commit is in doubt is left alone and said as the abort's failure.
    pub fn abort(&mut self, wait: Duration) -> Abort {
        let mut pending = false;
        for lane in self.lanes.iter_mut().filter(|l| !l.ended) {
            if lane.in_doubt {
                lane.ended = true;
                self.abort_failure.get_or_insert_with(|| {
                    "a commit's outcome is unknown; the task's next owner settles its transaction".into()
                });
                continue;
            }
            // librdkafka's abort purges what is in flight and then waits until those delivery
            // reports are served; rdkafka's abort does not serve them, so it is done here (a
            // purge reports per partition, so one event at a time would not keep up).
            poll_producer(&lane.producer, ABORT_SERVE);
            match lane.producer.abort_transaction(wait) {
                Ok(()) => lane.ended = true,
                Err(e) if resumable(&e) => pending = true,
                Err(e) => {
                    lane.ended = true;
                    self.abort_failure.get_or_insert_with(|| e.to_string());
                }
            }
        }
        match (pending, self.abort_failure.take()) {
            (true, failure) => {
                self.abort_failure = failure;
                Abort::Pending
            }
            (false, None) => Abort::Done,
            (false, Some(failure)) => Abort::Failed(failure),
        }
    }
}

/// The longest a commit call waits for the coordinator (see [`Lanes::commit`]).
const COMMIT_CALL_WAIT: Duration = Duration::from_secs(10);

/// How long delivery reports are served before each step of an abort.
const ABORT_SERVE: Duration = Duration::from_millis(2);

/// Whether a transactional call timed out and may be called again to carry on.
pub(super) fn resumable(e: &KafkaError) -> bool {
    match e {
        KafkaError::Transaction(e) => e.is_retriable() && !e.txn_requires_abort(),
        KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut) => true,
        _ => false,
    }
}
