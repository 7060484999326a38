//! How flows map to threads. Every flow has the same four stages (fetch, filter, transform,
//! produce); the stages of all flows run on one pool of `strait.stage.threads` threads (4 by
//! default), however many flows there are. Stage `s` of flow `f` (in config order) runs on
//! thread `(4f + s) mod T`, so with the default each thread runs one kind of stage for every
//! flow, and 20 flows on a 2-core machine are 4 stage threads, not 80.
//!
//! A thread with a single stage lets it block on its input, as a dedicated thread would. A
//! thread with several never blocks in one: each stage takes a step (a batch at most) without
//! waiting, holds a batch its next stage has no room for until there is, and the thread sleeps
//! a millisecond when no stage had work. One slow or stuck target therefore holds up only its
//! own flow.
//!
//! Periodic work (topic discovery, heartbeats, checkpoints and group offset sync) runs on two
//! more threads shared by all flows: one for checkpoints, whose rounds can take seconds, and one
//! for the rest.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::FlowError;

/// What a stage did in one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// It moved a batch (or part of one).
    Worked,
    /// It had nothing to do, or its next stage had no room.
    Idle,
    /// Its input is closed and everything it held is passed on: it is done.
    Finished,
}

/// One stage of one flow, run a step at a time.
pub trait StageTask: Send {
    /// Does at most one batch of work. It may block up to `wait` for input or room; the pool
    /// passes zero when the thread runs other stages too.
    fn step(&mut self, wait: Duration) -> Result<Step, FlowError>;
}

/// Periodic work of one flow.
pub trait Periodic: Send {
    /// Does whatever came due since the last call; failures are logged and retried later.
    fn tick(&mut self);
    /// Called once when the process stops.
    fn finish(&mut self) {}
}

/// How long a thread with a single stage lets it wait for input.
const SOLE_WAIT: Duration = Duration::from_millis(100);
/// How long a thread whose stages all had nothing to do sleeps.
const IDLE_SLEEP: Duration = Duration::from_millis(1);
/// How often the periodic threads look for due work.
const TICK: Duration = Duration::from_millis(50);

/// The first error of any stage; setting it stops every flow.
#[derive(Clone, Default)]
pub struct FirstError(Arc<Mutex<Option<FlowError>>>);

impl FirstError {
    /// Keeps `e` unless an error came first, and stops every flow.
    pub fn set(&self, e: FlowError, stop: &AtomicBool) {
        stop.store(true, Ordering::Relaxed);
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert(e);
    }

    /// The error, if a stage failed.
    pub fn take(&self) -> Option<FlowError> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// Spawns `threads` stage threads running `tasks` (in flow order, four per flow); they end
/// when every stage has finished.
pub fn spawn_stages(tasks: Vec<Box<dyn StageTask>>, threads: usize, errors: &FirstError, stop: &Arc<AtomicBool>) -> Result<Vec<JoinHandle<()>>, FlowError> {
    let threads = threads.clamp(1, tasks.len().max(1));
    let mut per_thread: Vec<Vec<Box<dyn StageTask>>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, task) in tasks.into_iter().enumerate() {
        per_thread[i % threads].push(task);
    }
    per_thread
        .into_iter()
        .enumerate()
        .map(|(i, tasks)| {
            let (errors, stop) = (errors.clone(), stop.clone());
            thread::Builder::new()
                .name(format!("stages {i}"))
                .spawn(move || run_stages(tasks, &errors, &stop))
                .map_err(|e| FlowError::Thread { flow: "*".into(), stage: "stages", what: format!("could not start: {e}") })
        })
        .collect()
}

fn run_stages(mut tasks: Vec<Box<dyn StageTask>>, errors: &FirstError, stop: &AtomicBool) {
    while !tasks.is_empty() {
        let wait = if tasks.len() == 1 { SOLE_WAIT } else { Duration::ZERO };
        let mut worked = false;
        tasks.retain_mut(|task| match task.step(wait) {
            Ok(Step::Worked) => {
                worked = true;
                true
            }
            Ok(Step::Idle) => true,
            Ok(Step::Finished) => false,
            Err(e) => {
                // Dropping the stage closes its channels, so the stages before and after it
                // finish too, and nothing after the failed batch reaches the target.
                errors.set(e, stop);
                false
            }
        });
        if !worked && tasks.len() > 1 {
            thread::sleep(IDLE_SLEEP);
        }
    }
}

/// Spawns a thread that ticks every task of `work` until `stop` is set, then finishes them.
pub fn spawn_periodic(name: &str, mut work: Vec<Box<dyn Periodic>>, stop: &Arc<AtomicBool>) -> Result<JoinHandle<()>, FlowError> {
    let stop = stop.clone();
    thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for w in work.iter_mut() {
                    w.tick();
                }
                thread::sleep(TICK);
            }
            for w in work.iter_mut() {
                w.finish();
            }
        })
        .map_err(|e| FlowError::Thread { flow: "*".into(), stage: "periodic", what: format!("could not start: {e}") })
}
