//! The shape shared by the middle stages (filter, transform): take a batch, work on it, hand
//! it on.

use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, SendTimeoutError, Sender};

use super::batch::Batch;
use super::pool::{StageTask, Step};
use super::FlowError;
use crate::events::QueueDepth;
use crate::policy::PolicyError;

/// The work of a middle stage on one batch.
pub type Work = Box<dyn FnMut(&mut Batch) -> Result<(), PolicyError> + Send>;

/// A stage's way out: the channel to the next stage, and a batch the next stage had no room
/// for yet. Holding it, instead of blocking, is what lets a thread run other flows' stages
/// while this flow is back-pressured.
pub struct Handoff {
    flow: String,
    next_stage: &'static str,
    output: Sender<Batch>,
    pending: Option<Batch>,
}

impl Handoff {
    /// `next_stage` names the stage `output` feeds, for the queue-depth gauge.
    pub fn new(flow: &str, next_stage: &'static str, output: Sender<Batch>) -> Self {
        Self { flow: flow.to_string(), next_stage, output, pending: None }
    }

    /// The batch held back last time, to offer again before taking new work.
    pub fn take_pending(&mut self) -> Option<Batch> {
        self.pending.take()
    }

    /// Hands `batch` on, waiting up to `wait` for room; holds it when there is none.
    pub fn offer(&mut self, batch: Batch, wait: Duration) -> Step {
        match self.output.send_timeout(batch, wait) {
            Ok(()) => {
                QueueDepth { flow: &self.flow, stage: self.next_stage, batches: self.output.len() }.emit();
                Step::Worked
            }
            Err(SendTimeoutError::Timeout(b)) => {
                self.pending = Some(b);
                Step::Idle
            }
            Err(SendTimeoutError::Disconnected(_)) => Step::Finished,
        }
    }
}

/// A middle stage: moves batches from `input` to the next stage through its work until either
/// side hangs up. When the work fails, the batch is not handed on (so no position passes it)
/// and the error stops the flow.
pub struct MiddleStage {
    input: Receiver<Batch>,
    work: Work,
    out: Handoff,
}

impl MiddleStage {
    /// `next_stage` names the stage `output` feeds, for the queue-depth gauge.
    pub fn new(flow: &str, next_stage: &'static str, input: Receiver<Batch>, output: Sender<Batch>, work: Work) -> Self {
        Self { input, work, out: Handoff::new(flow, next_stage, output) }
    }
}

impl StageTask for MiddleStage {
    fn step(&mut self, wait: Duration) -> Result<Step, FlowError> {
        let batch = match self.out.take_pending() {
            Some(b) => b,
            None => {
                let mut b = match self.input.recv_timeout(wait) {
                    Ok(b) => b,
                    Err(RecvTimeoutError::Timeout) => return Ok(Step::Idle),
                    Err(RecvTimeoutError::Disconnected) => return Ok(Step::Finished),
                };
                (self.work)(&mut b)?;
                b
            }
        };
        Ok(self.out.offer(batch, wait))
    }
}
