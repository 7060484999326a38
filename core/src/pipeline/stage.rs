//! The loop shared by the middle stages: take a batch, work on it, hand it on.

use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::{Receiver, Sender};

use super::batch::Batch;
use crate::events::QueueDepth;
use crate::policy::PolicyError;

/// Moves batches from `input` to `output` through `work` until either side hangs up.
/// `next_stage` names the stage `output` feeds, for the queue-depth gauge. When `work` fails the
/// batch is not handed on (so no position passes it), `stop` is set, and the error returned.
pub fn run_batches(
    flow: &str,
    next_stage: &'static str,
    input: Receiver<Batch>,
    output: Sender<Batch>,
    stop: &AtomicBool,
    mut work: impl FnMut(&mut Batch) -> Result<(), PolicyError>,
) -> Result<(), PolicyError> {
    for mut batch in input {
        if let Err(e) = work(&mut batch) {
            stop.store(true, Ordering::Relaxed);
            return Err(e);
        }
        if output.send(batch).is_err() {
            return Ok(());
        }
        QueueDepth { flow, stage: next_stage, batches: output.len() }.emit();
    }
    Ok(())
}
