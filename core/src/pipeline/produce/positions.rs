//! At-least-once position writes, fenced by the flow's group membership: each flush is one
//! transaction that carries the member id and generation ([`GroupSession`]), so a process the
//! group has dropped cannot overwrite what the tasks' new owner stored. Adding the membership
//! to a transaction is a blocking call into librdkafka that cannot be resumed after a short
//! wait, so the writer runs on a thread of its own and the produce stage only hands it batches.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;

use super::in_flight::POSITION_TICKET;
use super::lanes::{resumable, TargetProducer};
use crate::cluster::poll_producer;
use crate::delivery::Outcome;
use crate::group::GroupSession;

/// How long one call into a position transaction may wait; a commit or abort that times out
/// is resumed until [`GIVE_UP`].
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one step of an abort waits before the producer's queue is served again.
const ABORT_STEP: Duration = Duration::from_millis(100);
/// How long a commit or abort is resumed before the writer counts as broken.
const GIVE_UP: Duration = Duration::from_secs(60);

/// A position record: key, and value (`None` for a tombstone).
pub type PositionRecord = (Vec<u8>, Option<Vec<u8>>);

/// The position writer of one flow, as the produce stage sees it.
pub struct PositionWriter {
    batches: Option<Sender<Vec<PositionRecord>>>,
    outcomes: Receiver<Result<(), Failure>>,
    /// A batch was handed over and its outcome is not in yet.
    busy: bool,
}

/// Why a position transaction did not commit.
#[derive(Debug)]
enum Failure {
    /// Aborted; the writer can take the next batch.
    Refused(String),
    /// The producer is unusable.
    Broken(String),
}

impl PositionWriter {
    /// Starts the writer of `flow` on `producer` (transactional, past `init_transactions`),
    /// writing to `topic` for the tasks `owned` of `session`.
    pub fn start(
        flow: &str,
        producer: TargetProducer,
        topic: String,
        session: Arc<GroupSession>,
        owned: BTreeSet<u32>,
    ) -> std::io::Result<Self> {
        let (batches, batch_rx) = crossbeam_channel::bounded::<Vec<PositionRecord>>(1);
        let (outcome_tx, outcomes) = crossbeam_channel::bounded(1);
        thread::Builder::new().name(format!("positions {flow}")).spawn(move || {
            for batch in batch_rx {
                let outcome = write(&producer, &topic, &session, &owned, &batch).map_err(|e| abort(&producer, e));
                let broken = matches!(outcome, Err(Failure::Broken(_)));
                if outcome_tx.send(outcome).is_err() || broken {
                    return;
                }
            }
        })?;
        Ok(Self { batches: Some(batches), outcomes, busy: false })
    }

    /// Hands over one transaction's worth of position records; `false` while the last batch is
    /// still being written (keep them for later). A writer whose thread ended reports it as
    /// [`Outcome::Broken`] next.
    pub fn hand_over(&mut self, batch: Vec<PositionRecord>) -> bool {
        if self.busy {
            return false;
        }
        let sent = self.batches.as_ref().is_some_and(|tx| tx.send(batch).is_ok());
        self.busy = true;
        sent
    }

    /// Whether a batch is being written.
    pub fn busy(&self) -> bool {
        self.busy
    }

    /// The outcome of the last batch, waiting for it at most `wait`.
    pub fn outcome(&mut self, wait: Duration) -> Outcome {
        if !self.busy {
            return Outcome::Idle;
        }
        let got = if wait.is_zero() {
            self.outcomes.try_recv().map_err(|e| e == TryRecvError::Empty)
        } else {
            self.outcomes.recv_timeout(wait).map_err(|e| e.is_timeout())
        };
        match got {
            Err(true) => Outcome::Pending,
            Err(false) => {
                self.busy = false;
                Outcome::Broken("the position writer's thread ended".into())
            }
            Ok(result) => {
                self.busy = false;
                match result {
                    Ok(()) => Outcome::Committed,
                    Err(Failure::Refused(e)) => Outcome::Failed(e),
                    Err(Failure::Broken(e)) => Outcome::Broken(e),
                }
            }
        }
    }
}

/// One position transaction: the records, the membership, the commit.
fn write(
    producer: &TargetProducer,
    topic: &str,
    session: &GroupSession,
    owned: &BTreeSet<u32>,
    batch: &[PositionRecord],
) -> Result<(), KafkaError> {
    producer.begin_transaction()?;
    for (key, value) in batch {
        loop {
            let mut record = BaseRecord::with_opaque_to(topic, POSITION_TICKET).key(&key[..]);
            if let Some(v) = value {
                record = record.payload(&v[..]);
            }
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    poll_producer(producer, Duration::from_millis(10));
                }
                Err((e, _)) => return Err(e),
            }
        }
    }
    session.join_transaction(producer, owned, STEP_TIMEOUT)?;
    // A commit that timed out is in progress inside librdkafka: only resuming it ends it.
    resume(GIVE_UP, || producer.commit_transaction(STEP_TIMEOUT))
}

/// Aborts the open transaction after `error`; whether the producer can take the next batch.
fn abort(producer: &TargetProducer, error: KafkaError) -> Failure {
    if let KafkaError::Transaction(e) = &error {
        if e.is_fatal() {
            return Failure::Broken(error.to_string());
        }
    }
    match resume(GIVE_UP, || serve_then_abort(producer)) {
        Ok(()) => Failure::Refused(error.to_string()),
        Err(e) => Failure::Broken(format!("{error}; aborting failed too: {e}")),
    }
}

/// One short step of an abort. librdkafka's abort purges the transaction's records and then
/// waits until their delivery reports are served; rdkafka's `abort_transaction` (unlike its
/// commit) does not serve them, and nothing else polls this producer, so one long call would
/// wait out its whole timeout every time, and a writer whose transaction the group refused (a
/// rebalance between its records and its commit) held its flow's stop for the full shutdown
/// timeout. Serving the queue between short steps lets the abort finish at once.
fn serve_then_abort(producer: &TargetProducer) -> Result<(), KafkaError> {
    producer.poll(Duration::ZERO);
    producer.abort_transaction(ABORT_STEP)
}

/// Calls `call` again while it times out in a way librdkafka resumes, for up to `limit`.
fn resume(limit: Duration, mut call: impl FnMut() -> Result<(), KafkaError>) -> Result<(), KafkaError> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        match call() {
            Err(e) if resumable(&e) && std::time::Instant::now() < deadline => continue,
            other => return other,
        }
    }
}
