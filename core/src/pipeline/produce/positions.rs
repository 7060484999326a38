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

use super::delivery::Delivery;
use super::lanes::TargetProducer;
use crate::group::GroupSession;

/// How long one step of a position transaction may take before it is given up (and its
/// positions written again at the next flush).
const STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// A position record: key, and value (`None` for a tombstone).
pub type PositionRecord = (Vec<u8>, Option<Vec<u8>>);

/// The position writer of one flow, as the produce stage sees it.
pub struct PositionWriter {
    batches: Option<Sender<Vec<PositionRecord>>>,
    outcomes: Receiver<Result<(), String>>,
    /// A batch was handed over and its outcome is not in yet.
    busy: bool,
}

/// What became of the batch handed over last.
pub enum Outcome {
    /// Still being written.
    Pending,
    /// Nothing is under way (committed, or none handed over).
    Idle,
    /// Not stored; the positions must be written again.
    Failed(String),
}

impl PositionWriter {
    /// Starts the writer of `flow` on `producer` (transactional, past `init_transactions`),
    /// writing to `topic` for the tasks `owned` of `session`.
    pub fn start(flow: &str, producer: TargetProducer, topic: String, session: Arc<GroupSession>, owned: BTreeSet<u32>) -> std::io::Result<Self> {
        let (batches, batch_rx) = crossbeam_channel::bounded::<Vec<PositionRecord>>(1);
        let (outcome_tx, outcomes) = crossbeam_channel::bounded(1);
        thread::Builder::new().name(format!("positions {flow}")).spawn(move || {
            for batch in batch_rx {
                let outcome = write(&producer, &topic, &session, &owned, &batch);
                if outcome.is_err() {
                    let _ = producer.abort_transaction(STEP_TIMEOUT);
                }
                if outcome_tx.send(outcome.map_err(|e| e.to_string())).is_err() {
                    return;
                }
            }
        })?;
        Ok(Self {
            batches: Some(batches),
            outcomes,
            busy: false,
        })
    }

    /// Hands over one transaction's worth of position records; `false` while the last batch is
    /// still being written (keep them for later).
    pub fn hand_over(&mut self, batch: Vec<PositionRecord>) -> bool {
        if self.busy {
            return false;
        }
        let sent = self.batches.as_ref().is_some_and(|tx| tx.send(batch).is_ok());
        self.busy = sent;
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
                Outcome::Failed("the position writer stopped".into())
            }
            Ok(result) => {
                self.busy = false;
                result.map_or_else(Outcome::Failed, |()| Outcome::Idle)
            }
        }
    }
}

/// One position transaction: the records, the membership, the commit.
fn write(producer: &TargetProducer, topic: &str, session: &GroupSession, owned: &BTreeSet<u32>, batch: &[PositionRecord]) -> Result<(), KafkaError> {
    producer.begin_transaction()?;
    for (key, value) in batch {
        loop {
            let mut record = BaseRecord::with_opaque_to(topic, Box::new(Delivery::Position)).key(&key[..]);
            if let Some(v) = value {
                record = record.payload(&v[..]);
            }
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => return Err(e),
            }
        }
    }
    session.join_transaction(producer, owned, STEP_TIMEOUT)?;
    producer.commit_transaction(STEP_TIMEOUT)
}
