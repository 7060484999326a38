//! How flows map to threads. Every flow has the same four stages (fetch, filter, transform,
//! produce); the stages of all flows run on one pool of `strait.stage.threads` threads (4 by
//! default), however many flows there are. The stages of the n-th flow started go to threads
//! `4n`, `4n + 1`, ... (mod T), so with the default each thread runs one kind of stage for
//! every flow, and 20 flows on a 2-core machine are 4 stage threads, not 80.
//!
//! A thread with a single stage lets it block on its input, as a dedicated thread would. A
//! thread with several never blocks in one: each stage takes a step (a batch at most) without
//! waiting, holds a batch its next stage has no room for until there is, and when no stage had
//! work the thread parks until a stage's [`Doorbell`] rings. A stage that waits on what rings
//! no bell (acknowledgements it polls for) keeps its thread looking: a millisecond at first,
//! twice as long each idle round after that, up to 16 ms. Without a ring, a parked thread still
//! looks every 100 ms, for what rings no bell (timers, new partitions). One slow or stuck
//! target therefore holds up only its own flow, and idle flows cost little: the four stage
//! threads of 20 idle flows took two thirds of a core looking every millisecond, 4.4% every
//! 16 ms, and 0.8% parked (`benches/flows.sh`, threads' CPU from `/proc`).
//!
//! Periodic work (topic discovery, heartbeats, checkpoints and group offset sync) runs on two
//! more threads shared by all flows: one for checkpoints, whose rounds can take seconds, and one
//! for the rest.
//!
//! A flow is the unit of failure: each task belongs to one flow's [`FlowControl`]. A stage that
//! fails or panics stops its own flow only; the pool drops the flow's tasks on a thread of their
//! own (dropping a Kafka client can wait on an unreachable broker) and tells the supervisor once
//! the last one is gone.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::doorbell::Doorbell;
use super::StageError;
use crate::health::{self, Beat};

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
    fn step(&mut self, wait: Duration) -> Result<Step, StageError>;

    /// Whether it waits on something that rings no doorbell (acknowledgements it must poll
    /// for, a component being compiled), so its thread must look again soon rather than park.
    fn polling(&self) -> bool {
        false
    }
}

/// Periodic work of one flow.
pub trait Periodic: Send {
    /// Does whatever came due since the last call; failures are logged and retried later.
    fn tick(&mut self);
    /// Called once when the flow stops, off the shared thread.
    fn finish(&mut self) {}
}

/// How long a thread with a single stage lets it wait for input.
const SOLE_WAIT: Duration = Duration::from_millis(100);
/// How long a thread whose stages all had nothing to do sleeps at first...
const IDLE_SLEEP: Duration = Duration::from_millis(1);
/// ...and at most, while a stage is polling.
const IDLE_SLEEP_MAX: Duration = Duration::from_millis(16);
/// How long a thread parks when no stage is polling, unless a doorbell rings: what a change
/// that rings no bell (new partitions from discovery, a timer of a stage) may wait.
const IDLE_PARK_MAX: Duration = Duration::from_millis(100);

/// How long a thread shared by several stages parks after a round in which none worked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IdleBackoff {
    next: Duration,
}

impl Default for IdleBackoff {
    fn default() -> Self {
        Self { next: IDLE_SLEEP }
    }
}

impl IdleBackoff {
    /// After a round: `None` when a stage worked (go on at once), else how long to park.
    /// `polling` says whether a stage waits on what rings no doorbell.
    fn after_round(&mut self, worked: bool, polling: bool) -> Option<Duration> {
        if worked {
            *self = Self::default();
            return None;
        }
        if !polling {
            return Some(IDLE_PARK_MAX);
        }
        let sleep = self.next;
        self.next = (self.next * 2).min(IDLE_SLEEP_MAX);
        Some(sleep)
    }
}
/// How often the periodic threads look for due work.
const TICK: Duration = Duration::from_millis(50);
/// How long a flow that failed gets to store the positions of what the target acknowledged.
const FAILED_DRAIN: Duration = Duration::from_secs(5);

/// A flow's tasks ended; the supervisor decides what comes next.
#[derive(Debug)]
pub struct FlowEnded {
    /// `source->target`.
    pub flow: String,
    /// Which start of the flow this was.
    pub generation: u64,
    /// The first failure, if it did not stop because it was asked to.
    pub error: Option<StageError>,
}

/// The handle every task of one running flow shares: its stop flag, its first error, and how
/// many of its tasks are still alive.
pub struct FlowControl {
    name: String,
    generation: u64,
    stop: Arc<AtomicBool>,
    deadline: Mutex<Option<Instant>>,
    error: Mutex<Option<StageError>>,
    live: AtomicUsize,
    ended: Sender<FlowEnded>,
    /// The doorbells of its stages, rung when it is asked to stop.
    bells: Mutex<Vec<Doorbell>>,
}

impl FlowControl {
    /// A control for the `generation`-th start of `name`; `ended` hears when its last task is gone.
    pub fn new(name: &str, generation: u64, ended: Sender<FlowEnded>) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_string(),
            generation,
            stop: Arc::new(AtomicBool::new(false)),
            deadline: Mutex::new(None),
            error: Mutex::new(None),
            live: AtomicUsize::new(0),
            ended,
            bells: Mutex::new(Vec::new()),
        })
    }

    /// `source->target`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The flag the flow's stages watch.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Asks the flow to stop, storing positions of what is acknowledged by `deadline` at the latest.
    pub fn stop(&self, deadline: Instant) {
        {
            let mut d = self.deadline.lock().unwrap_or_else(|p| p.into_inner());
            *d = Some(d.map_or(deadline, |old| old.min(deadline)));
        }
        self.stop.store(true, Ordering::Relaxed);
        self.bells.lock().unwrap_or_else(|p| p.into_inner()).iter().for_each(Doorbell::ring);
    }

    /// Whether the flow was asked to stop.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// By when a stopping flow must be gone.
    pub fn deadline(&self) -> Option<Instant> {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps the flow's first failure and stops it.
    pub fn fail(&self, e: StageError) {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
        self.stop(Instant::now() + FAILED_DRAIN);
    }

    fn started(&self, tasks: usize) {
        self.live.fetch_add(tasks, Ordering::SeqCst);
    }

    fn task_ended(&self) {
        if self.live.fetch_sub(1, Ordering::SeqCst) == 1 {
            let error = self.error.lock().unwrap_or_else(|p| p.into_inner()).take();
            // The supervisor only goes away when the process stops.
            let _ = self.ended.send(FlowEnded { flow: self.name.clone(), generation: self.generation, error });
        }
    }
}

/// A task and the flow it belongs to.
struct Owned<T: ?Sized> {
    flow: Arc<FlowControl>,
    task: Box<T>,
}

/// The shared threads: stage threads and the two periodic threads.
pub struct Pool {
    stages: Vec<(Sender<Owned<dyn StageTask>>, thread::Thread)>,
    periodic: Sender<Owned<dyn Periodic>>,
    checkpoints: Sender<Owned<dyn Periodic>>,
    next: AtomicUsize,
}

impl Pool {
    /// Starts `threads` stage threads and the periodic threads.
    pub fn start(threads: usize) -> Result<Self, StageError> {
        let spawn_err = |what: &'static str| {
            move |e: std::io::Error| StageError::Thread {
                flow: "*".into(),
                stage: what,
                what: format!("could not start: {e}"),
            }
        };
        let mut stages = Vec::new();
        for i in 0..threads.max(1) {
            let (tx, rx) = crossbeam_channel::unbounded();
            let beat = health::beat(&format!("stages {i}"), health::STAGE_BOUND);
            let handle = thread::Builder::new()
                .name(format!("stages {i}"))
                .spawn(move || run_stages(&rx, &beat))
                .map_err(spawn_err("stages"))?;
            stages.push((tx, handle.thread().clone()));
        }
        let periodic_thread = |name: &str| -> Result<Sender<Owned<dyn Periodic>>, StageError> {
            let (tx, rx) = crossbeam_channel::unbounded();
            let beat = health::beat(name, health::PERIODIC_BOUND);
            thread::Builder::new()
                .name(name.to_string())
                .spawn(move || run_periodic(&rx, &beat))
                .map_err(spawn_err("periodic"))?;
            Ok(tx)
        };
        let periodic = periodic_thread("periodic")?;
        let checkpoints = periodic_thread("checkpoints")?;
        Ok(Self { stages, periodic, checkpoints, next: AtomicUsize::new(0) })
    }

    /// Runs a flow's stages (in pipeline order, each with its doorbell), periodic work and
    /// checkpoint work.
    pub fn add(
        &self,
        flow: &Arc<FlowControl>,
        stages: Vec<(Box<dyn StageTask>, Doorbell)>,
        periodic: Vec<Box<dyn Periodic>>,
        checkpoints: Vec<Box<dyn Periodic>>,
    ) {
        flow.started(stages.len() + periodic.len() + checkpoints.len());
        let base = self.next.fetch_add(stages.len(), Ordering::Relaxed);
        for (i, (task, bell)) in stages.into_iter().enumerate() {
            let (thread, handle) = &self.stages[(base + i) % self.stages.len()];
            bell.hang(handle.clone());
            flow.bells.lock().unwrap_or_else(|p| p.into_inner()).push(bell.clone());
            hand_over(thread, Owned { flow: flow.clone(), task });
            // A parked thread takes its new stage now.
            bell.ring();
        }
        for task in periodic {
            hand_over(&self.periodic, Owned { flow: flow.clone(), task });
        }
        for task in checkpoints {
            hand_over(&self.checkpoints, Owned { flow: flow.clone(), task });
        }
    }
}

/// Gives a task to a pool thread; the threads outlive every sender, so a failed send means the
/// process is going down and the task is simply ended.
fn hand_over<T: ?Sized + Send + 'static>(thread: &Sender<Owned<T>>, owned: Owned<T>)
where
    Box<T>: Send,
{
    if let Err(crossbeam_channel::SendError(owned)) = thread.send(owned) {
        owned.flow.task_ended();
    }
}

/// Drops what a finished task holds on a thread of its own: closing a Kafka client waits for
/// its brokers, and a frozen broker must not hold up the flows that share the pool thread.
fn reap(flow: Arc<FlowControl>, what: impl FnOnce() + Send + 'static) {
    let spawned = thread::Builder::new().name("reaper".into()).spawn({
        let flow = flow.clone();
        move || {
            let _ = catch_unwind(AssertUnwindSafe(what));
            flow.task_ended();
        }
    });
    if spawned.is_err() {
        // No thread to spare: the task is ended without closing its clients cleanly.
        flow.task_ended();
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

fn run_stages(injector: &Receiver<Owned<dyn StageTask>>, beat: &Beat) {
    let mut tasks: Vec<Owned<dyn StageTask>> = Vec::new();
    let mut idle = IdleBackoff::default();
    loop {
        while let Ok(t) = injector.try_recv() {
            tasks.push(t);
        }
        if tasks.is_empty() {
            match injector.recv_timeout(SOLE_WAIT) {
                Ok(t) => tasks.push(t),
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        let wait = if tasks.len() == 1 { SOLE_WAIT } else { Duration::ZERO };
        let (mut worked, mut polling) = (false, false);
        let mut i = 0;
        while i < tasks.len() {
            let owned = &mut tasks[i];
            beat.enter();
            let stepped = catch_unwind(AssertUnwindSafe(|| owned.task.step(wait)));
            beat.leave();
            let done = match stepped {
                Ok(Ok(Step::Worked)) => {
                    worked = true;
                    false
                }
                Ok(Ok(Step::Idle)) => false,
                Ok(Ok(Step::Finished)) => true,
                // Ending the stage closes its channels, so the stages before and after it
                // finish too, and nothing after the failed batch reaches the target.
                Ok(Err(e)) => {
                    owned.flow.fail(e);
                    true
                }
                Err(panic) => {
                    let what = format!("panicked: {}", panic_message(panic.as_ref()));
                    owned.flow.fail(StageError::Thread { flow: owned.flow.name().to_string(), stage: "stage", what });
                    true
                }
            };
            if done {
                let Owned { flow, task } = tasks.swap_remove(i);
                reap(flow, move || drop(task));
            } else {
                polling |= tasks[i].task.polling();
                i += 1;
            }
        }
        if tasks.len() > 1 {
            if let Some(pause) = idle.after_round(worked, polling) {
                // A doorbell ends the pause early; so does a ring that came during the round.
                thread::park_timeout(pause);
            }
        }
    }
}

fn run_periodic(injector: &Receiver<Owned<dyn Periodic>>, beat: &Beat) {
    let mut tasks: Vec<Owned<dyn Periodic>> = Vec::new();
    loop {
        while let Ok(t) = injector.try_recv() {
            tasks.push(t);
        }
        let mut i = 0;
        while i < tasks.len() {
            let owned = &mut tasks[i];
            beat.enter();
            let failed = !owned.flow.stopping() && catch_unwind(AssertUnwindSafe(|| owned.task.tick())).is_err();
            beat.leave();
            if failed {
                let flow = owned.flow.name().to_string();
                owned.flow.fail(StageError::Thread { flow, stage: "periodic", what: "panicked".into() });
            }
            if owned.flow.stopping() {
                let Owned { flow, mut task } = tasks.swap_remove(i);
                reap(flow, move || task.finish());
            } else {
                i += 1;
            }
        }
        if tasks.is_empty() {
            match injector.recv_timeout(TICK) {
                Ok(t) => tasks.push(t),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        } else {
            thread::sleep(TICK);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn idle_threads_sleep_longer_each_round_up_to_a_bound_and_wake_fully_after_work() {
        let mut idle = IdleBackoff::default();
        let sleeps: Vec<u64> =
            (0..7).filter_map(|_| idle.after_round(false, true)).map(|d| d.as_millis() as u64).collect();
        assert_eq!(sleeps, [1, 2, 4, 8, 16, 16, 16]);
        assert_eq!(idle.after_round(true, true), None, "a stage worked: the next round comes at once");
        assert_eq!(
            idle.after_round(false, true),
            Some(IDLE_SLEEP),
            "and the first idle round after work sleeps the least"
        );
        assert_eq!(
            idle.after_round(false, false),
            Some(IDLE_PARK_MAX),
            "no stage polls: the thread parks until a doorbell rings"
        );
    }

    fn wait_for_more(steps: &AtomicU64, than: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = steps.load(Ordering::Relaxed);
            assert!(Instant::now() < deadline, "no step within 10 s");
            if now > than {
                return now;
            }
            thread::yield_now();
        }
    }

    #[test]
    fn a_thread_of_idle_stages_parks_until_a_doorbell_rings_and_a_ring_steps_them_at_once() {
        let pool = Pool::start(1).expect("pool");
        let (ended_tx, _ended_rx) = crossbeam_channel::unbounded();
        let flow = FlowControl::new("a->b", 1, ended_tx);
        let steps = Arc::new(AtomicU64::new(0));
        let bell = Doorbell::default();
        let stages: Vec<(Box<dyn StageTask>, Doorbell)> = vec![
            (Box::new(Counting(steps.clone(), flow.stop_flag(), Step::Idle)), bell.clone()),
            (Box::new(Counting(Arc::new(AtomicU64::new(0)), flow.stop_flag(), Step::Idle)), Doorbell::default()),
        ];
        pool.add(&flow, stages, Vec::new(), Vec::new());
        let first = wait_for_more(&steps, 0);
        thread::sleep(Duration::from_secs(1));
        let in_a_second = steps.load(Ordering::Relaxed) - first;
        // Parked for IDLE_PARK_MAX between rounds: about ten; looking every 16 ms: sixty.
        assert!(in_a_second <= 20, "an idle thread stepped its stages {in_a_second} times in a second");

        // Each ring comes just after a round, when the thread is about to park: unheard, every
        // one would wait out IDLE_PARK_MAX, two seconds for twenty.
        let started = Instant::now();
        let mut seen = steps.load(Ordering::Relaxed);
        for _ in 0..20 {
            seen = wait_for_more(&steps, seen);
            bell.ring();
        }
        wait_for_more(&steps, seen);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(1), "twenty rings took {took:?} to be answered");
        flow.stop(Instant::now());
    }

    /// Counts its steps, each of which ends as `.2` says; never finishes on its own, and
    /// polls nothing.
    struct Counting(Arc<AtomicU64>, Arc<AtomicBool>, Step);

    impl StageTask for Counting {
        fn step(&mut self, _wait: Duration) -> Result<Step, StageError> {
            if self.1.load(Ordering::Relaxed) {
                return Ok(Step::Finished);
            }
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok(self.2)
        }
    }

    /// Panics on its third step.
    struct Panicking(u32);

    impl StageTask for Panicking {
        fn step(&mut self, _wait: Duration) -> Result<Step, StageError> {
            self.0 += 1;
            assert!(self.0 < 3, "a bug in a stage");
            Ok(Step::Worked)
        }
    }

    #[test]
    fn a_panicking_stage_ends_its_own_flow_and_the_other_flow_on_the_thread_keeps_stepping() {
        let pool = Pool::start(1).expect("pool");
        let (ended_tx, ended_rx) = crossbeam_channel::unbounded();
        let healthy = FlowControl::new("a->b", 1, ended_tx.clone());
        let broken = FlowControl::new("b->a", 1, ended_tx);
        let steps = Arc::new(AtomicU64::new(0));
        pool.add(
            &healthy,
            vec![(Box::new(Counting(steps.clone(), healthy.stop_flag(), Step::Worked)), Doorbell::default())],
            Vec::new(),
            Vec::new(),
        );
        pool.add(&broken, vec![(Box::new(Panicking(0)), Doorbell::default())], Vec::new(), Vec::new());

        let ended = ended_rx.recv_timeout(Duration::from_secs(10)).expect("the broken flow ends");
        assert_eq!(ended.flow, "b->a");
        assert!(
            matches!(&ended.error, Some(StageError::Thread { what, .. }) if what.contains("a bug in a stage")),
            "{:?}",
            ended.error
        );
        assert!(!healthy.stopping(), "the other flow was not stopped");
        let before = steps.load(Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_secs(10);
        while steps.load(Ordering::Relaxed) < before + 1000 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        assert!(
            steps.load(Ordering::Relaxed) >= before + 1000,
            "the healthy flow's stage kept stepping after the panic"
        );

        healthy.stop(Instant::now());
        let ended = ended_rx.recv_timeout(Duration::from_secs(10)).expect("the healthy flow ends when asked");
        assert_eq!((ended.flow.as_str(), ended.error.is_none()), ("a->b", true));
    }
}
