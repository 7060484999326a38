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

/// A middle stage: moves batches from `input` to `output` through its work until either side
/// hangs up. When the work fails, the batch is not handed on (so no position passes it) and
/// the error stops the flow.
pub struct MiddleStage {
    flow: String,
    next_stage: &'static str,
    input: Receiver<Batch>,
    output: Sender<Batch>,
    work: Work,
    pending: Option<Batch>,
}

impl MiddleStage {
    /// `next_stage` names the stage `output` feeds, for the queue-depth gauge.
    pub fn new(flow: &str, next_stage: &'static str, input: Receiver<Batch>, output: Sender<Batch>, work: Work) -> Self {
        Self { flow: flow.to_string(), next_stage, input, output, work, pending: None }
    }
}

impl StageTask for MiddleStage {
    fn step(&mut self, wait: Duration) -> Result<Step, FlowError> {
        let batch = match self.pending.take() {
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
        match self.output.send_timeout(batch, wait) {
            Ok(()) => {
                QueueDepth { flow: &self.flow, stage: self.next_stage, batches: self.output.len() }.emit();
                Ok(Step::Worked)
            }
            Err(SendTimeoutError::Timeout(b)) => {
                self.pending = Some(b);
                Ok(Step::Idle)
            }
            Err(SendTimeoutError::Disconnected(_)) => Ok(Step::Finished),
        }
    }
}
