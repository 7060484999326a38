//! The loop shared by the middle stages: take a batch, work on it, hand it on.

use crossbeam_channel::{Receiver, Sender};

use super::batch::Batch;
use crate::events::QueueDepth;

/// Moves batches from `input` to `output` through `work` until either side hangs up.
/// `next_stage` names the stage `output` feeds, for the queue-depth gauge.
pub fn run_batches(flow: &str, next_stage: &'static str, input: Receiver<Batch>, output: Sender<Batch>, mut work: impl FnMut(&mut Batch)) {
    for mut batch in input {
        work(&mut batch);
        if output.send(batch).is_err() {
            return;
        }
        QueueDepth { flow, stage: next_stage, batches: output.len() }.emit();
    }
}
