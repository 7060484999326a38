//! The shape shared by the middle stages (filter, transform): take a batch, work on it, hand
//! it on.

use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, SendTimeoutError, Sender};

use super::doorbell::Doorbell;
use super::pool::{StageTask, Step};
use super::StageError;
use crate::events::QueueDepth;
use crate::record::{Batch, HookError, RecordFilter, RecordTransform};

/// The work of a middle stage on one batch.
pub trait Work: Send {
    /// Whether the work can take `batch` now. A record hook whose component is being compiled
    /// again says no, and so does a transform waiting for a schema the batch carries, so the
    /// batch waits without blocking the thread.
    fn ready(&mut self, _batch: &Batch) -> bool {
        true
    }

    /// Works on one batch; an error stops the flow before the batch.
    fn work(&mut self, batch: &mut Batch) -> Result<(), HookError>;
}

impl Work for Box<dyn RecordFilter> {
    fn ready(&mut self, _batch: &Batch) -> bool {
        RecordFilter::ready(self.as_mut())
    }

    fn work(&mut self, batch: &mut Batch) -> Result<(), HookError> {
        self.filter(batch)
    }
}

impl Work for Box<dyn RecordTransform> {
    fn ready(&mut self, batch: &Batch) -> bool {
        RecordTransform::ready(self.as_mut(), batch)
    }

    fn work(&mut self, batch: &mut Batch) -> Result<(), HookError> {
        self.transform(batch)
    }
}

/// How long a sole stage whose work is not ready waits before looking again.
const NOT_READY_WAIT: Duration = Duration::from_millis(5);

/// A stage's way out: the channel to the next stage, the next stage's doorbell, and a batch
/// the next stage had no room for yet. Holding it, instead of blocking, is what lets a thread
/// run other flows' stages while this flow is back-pressured.
pub struct Handoff {
    flow: String,
    next_stage: &'static str,
    /// `None` only while being dropped.
    output: Option<Sender<Batch>>,
    next_bell: Doorbell,
    pending: Option<Batch>,
}

impl Handoff {
    /// `next_stage` names the stage `output` feeds, for the queue-depth gauge; `next_bell`
    /// wakes it.
    pub fn new(flow: &str, next_stage: &'static str, output: Sender<Batch>, next_bell: Doorbell) -> Self {
        Self { flow: flow.to_string(), next_stage, output: Some(output), next_bell, pending: None }
    }

    /// The batch held back last time, to offer again before taking new work.
    pub fn take_pending(&mut self) -> Option<Batch> {
        self.pending.take()
    }

    /// Hands `batch` on, waiting up to `wait` for room; holds it when there is none.
    pub fn offer(&mut self, batch: Batch, wait: Duration) -> Step {
        let Some(output) = self.output.as_ref() else { return Step::Finished };
        match output.send_timeout(batch, wait) {
            Ok(()) => {
                self.next_bell.ring();
                QueueDepth { flow: &self.flow, stage: self.next_stage, batches: output.len() }.emit();
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

impl Drop for Handoff {
    /// Closes the channel, then wakes the next stage to find it closed and finish in turn.
    fn drop(&mut self) {
        drop(self.output.take());
        self.next_bell.ring();
    }
}

/// A middle stage: moves batches from `input` to the next stage through its work until either
/// side hangs up. When the work fails, the batch is not handed on (so no position passes it)
/// and the error stops the flow.
pub struct MiddleStage {
    input: Receiver<Batch>,
    /// Rung on taking a batch: the stage before may hold one back for want of room.
    before: Doorbell,
    work: Box<dyn Work>,
    /// A batch taken from the input while the work was not ready.
    held: Option<Batch>,
    out: Handoff,
}

impl MiddleStage {
    /// `next_stage` names the stage `output` feeds, for the queue-depth gauge; `bells` are the
    /// doorbells of the stages before and after this one.
    pub fn new(
        flow: &str,
        next_stage: &'static str,
        input: Receiver<Batch>,
        output: Sender<Batch>,
        work: Box<dyn Work>,
        bells: Neighbours,
    ) -> Self {
        Self { input, before: bells.before, work, held: None, out: Handoff::new(flow, next_stage, output, bells.after) }
    }
}

/// The doorbells of a stage's neighbours in the pipeline.
#[derive(Debug, Clone, Default)]
pub struct Neighbours {
    /// The stage that feeds this one.
    pub before: Doorbell,
    /// The stage this one feeds.
    pub after: Doorbell,
}

impl StageTask for MiddleStage {
    fn step(&mut self, wait: Duration) -> Result<Step, StageError> {
        if let Some(b) = self.out.take_pending() {
            return Ok(self.out.offer(b, wait));
        }
        let mut batch = match self.held.take() {
            Some(b) => b,
            None => match self.input.recv_timeout(wait) {
                Ok(b) => {
                    self.before.ring();
                    b
                }
                Err(RecvTimeoutError::Timeout) => return Ok(Step::Idle),
                Err(RecvTimeoutError::Disconnected) => return Ok(Step::Finished),
            },
        };
        if !self.work.ready(&batch) {
            self.held = Some(batch);
            std::thread::sleep(wait.min(NOT_READY_WAIT));
            return Ok(Step::Idle);
        }
        self.work.work(&mut batch)?;
        Ok(self.out.offer(batch, wait))
    }

    fn polling(&self) -> bool {
        // A batch held for a component being compiled or a schema being copied: nothing rings
        // when it is ready.
        self.held.is_some()
    }
}
