//! The supervisor: one loop that owns every flow's state and the shared threads.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{select, Receiver, Sender};

use super::backoff::Backoff;

mod reload;
use super::assemble::{build_flow, FlowParts, Shared};
use super::FlowError;
use crate::config::{Config, FlowConfig};
use crate::events::{FlowStateChanged, ShutdownTimedOut};
use crate::group::{GroupEvent, Membership, Tasks};
use crate::pipeline::{FlowControl, FlowEnded, Pool, StageError};
use crate::policy::modified;

/// How often the supervisor looks at timers, files and signals when nothing else happens.
const TICK: Duration = Duration::from_millis(100);
/// How often the config file and parked flows' plugin files are looked at for changes.
const FILE_CHECK: Duration = Duration::from_secs(1);

/// How `strait run` was asked to behave.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Stop every flow and exit with the error at the first failure of any flow.
    pub fail_fast: bool,
    /// The config file, re-read on SIGHUP and when it changes.
    pub config_path: Option<PathBuf>,
    /// `--instance-id`, which a reloaded config must not lose.
    pub instance_id: Option<String>,
}

/// The flags the signal handlers set.
#[derive(Debug, Clone, Default)]
pub struct Signals {
    /// SIGTERM / SIGINT: stop every flow and return.
    pub stop: Arc<AtomicBool>,
    /// SIGHUP: read the config file again.
    pub reload: Arc<AtomicBool>,
}

/// Why `run` returned an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Every flow is parked on a failure the operator must fix.
    #[error("every flow is parked: {0}")]
    AllParked(String),
    /// A flow failed and `--fail-fast` was asked for.
    #[error("{0} (--fail-fast)")]
    FailFast(FlowError),
    /// The shared threads could not start.
    #[error(transparent)]
    Start(StageError),
}

#[derive(Debug)]
enum State {
    Starting,
    Running { since: Instant },
    Stopping,
    Waiting { until: Instant },
    Parked { reason: String, plugin: Option<(PathBuf, Option<SystemTime>)> },
    Stopped,
}

impl State {
    fn name(&self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Running { .. } => "running",
            State::Stopping | State::Stopped => "stopped",
            State::Waiting { .. } => "restarting",
            State::Parked { .. } => "parked",
        }
    }

    fn active(&self) -> bool {
        matches!(self, State::Starting | State::Running { .. } | State::Stopping)
    }
}

/// Why a flow whose group changed its tasks stops and starts again.
const TASKS_CHANGED: &str = "its tasks changed; starting it with the tasks it owns now";
/// Why a flow whose config changed stops and starts again.
pub(super) const CONFIG_CHANGED: &str = "its config changed; starting it with the new one";

/// What to do once a flow that was asked to stop has stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Then {
    Stay,
    /// Start it again, saying why it stopped.
    Restart(&'static str),
    Remove,
    /// Park it, for this reason (a setting its new group member's client refused).
    Park(String),
}

impl Then {
    /// What a flow does once stopped when its tasks change: restart with them, unless it was
    /// already asked for something else (its removal, a park, a restart with a new config),
    /// which still happens; the new tasks are then taken up if anything starts.
    fn after_tasks_changed(&self) -> Then {
        match self {
            Then::Stay => Then::Restart(TASKS_CHANGED),
            pending => pending.clone(),
        }
    }
}

struct Flow {
    config: FlowConfig,
    fingerprint: u64,
    generation: u64,
    state: State,
    control: Option<Arc<FlowControl>>,
    backoff: Backoff,
    then: Then,
    /// The flow's membership in its group on the target.
    membership: Option<Membership>,
    /// Memberships a reload replaced, left once the flow has stopped: its last positions are
    /// stored under them.
    retiring: Vec<Membership>,
    /// The tasks this process runs; `None` until the group first says.
    tasks: Option<Tasks>,
    /// Revocations waiting for the flow to have stored its positions.
    revoked: Vec<Sender<()>>,
}

impl Flow {
    /// The flow's run ended, failed or stopped: its positions are stored, so the group may hand
    /// its revoked tasks on, and the memberships a reload replaced leave (into `leaving`, until
    /// their threads end).
    fn run_ended(&mut self, leaving: &mut Vec<Membership>) {
        self.control = None;
        for done in self.revoked.drain(..) {
            let _ = done.send(());
        }
        for old in self.retiring.drain(..) {
            old.leave();
            leaving.push(old);
        }
    }
}

struct Built {
    flow: String,
    generation: u64,
    result: Result<FlowParts, FlowError>,
}

struct Supervisor {
    config: Arc<Config>,
    options: RunOptions,
    shared: Arc<Shared>,
    pool: Pool,
    flows: BTreeMap<String, Flow>,
    built: (Sender<Built>, Receiver<Built>),
    ended: (Sender<FlowEnded>, Receiver<FlowEnded>),
    group: (Sender<GroupEvent>, Receiver<GroupEvent>),
    fatal: Option<FlowError>,
    /// Memberships of removed or changed flows, until their threads end.
    leaving: Vec<Membership>,
    config_modified: Option<SystemTime>,
    last_file_check: Instant,
    /// Set once the process stops: group events no longer start or restart a flow.
    shutting_down: bool,
}

/// Runs every flow of `config` until `signals.stop` is set, supervising each on its own.
pub fn run(config: Config, options: RunOptions, signals: &Signals) -> Result<(), RunError> {
    let pool = Pool::start(config.stage_threads).map_err(RunError::Start)?;
    let config_modified = options.config_path.as_deref().and_then(modified);
    let mut s = Supervisor {
        config: Arc::new(config),
        options,
        shared: Arc::new(Shared::default()),
        pool,
        flows: BTreeMap::new(),
        built: crossbeam_channel::unbounded(),
        ended: crossbeam_channel::unbounded(),
        group: crossbeam_channel::unbounded(),
        fatal: None,
        leaving: Vec::new(),
        config_modified,
        last_file_check: Instant::now(),
        shutting_down: false,
    };
    let flows = s.config.flows.clone();
    for flow in flows {
        s.add(flow);
    }
    loop {
        s.wait_for_news(TICK);
        if signals.stop.load(Ordering::Relaxed) {
            s.shutdown();
            return Ok(());
        }
        if let Some(e) = s.fatal.take() {
            s.shutdown();
            return Err(RunError::FailFast(e));
        }
        if signals.reload.swap(false, Ordering::Relaxed) {
            s.reload();
        }
        if s.last_file_check.elapsed() >= FILE_CHECK {
            s.last_file_check = Instant::now();
            s.check_files();
        }
        s.restart_due();
        if !s.flows.is_empty() && s.flows.values().all(|f| matches!(f.state, State::Parked { .. })) {
            let reasons: Vec<String> = s
                .flows
                .values()
                .filter_map(|f| match &f.state {
                    State::Parked { reason, .. } => Some(reason.clone()),
                    _ => None,
                })
                .collect();
            return Err(RunError::AllParked(reasons.join("; ")));
        }
    }
}

impl Supervisor {
    /// Handles what arrived within `wait`: finished builds and flows whose tasks all ended.
    fn wait_for_news(&mut self, wait: Duration) {
        let (built, ended, group) = (self.built.1.clone(), self.ended.1.clone(), self.group.1.clone());
        select! {
            recv(built) -> b => if let Ok(b) = b { self.on_built(b) },
            recv(ended) -> e => if let Ok(e) = e { self.on_ended(e) },
            recv(group) -> g => if let Ok(g) = g { self.on_group(g) },
            default(wait) => {}
        }
    }

    fn set_state(&mut self, name: &str, state: State, reason: &str) {
        let Some(f) = self.flows.get_mut(name) else { return };
        f.state = state;
        FlowStateChanged { flow: name, state: f.state.name(), reason }.emit();
    }

    /// Joins the flow's group; the flow starts once the group says which tasks it runs.
    fn add(&mut self, config: FlowConfig) {
        let name = config.name();
        let fingerprint = config.fingerprint(&self.config);
        let membership = Membership::start(&self.config, &config, self.group.0.clone(), self.config.shutdown_timeout);
        let flow = Flow {
            config,
            fingerprint,
            generation: 0,
            state: State::Stopped,
            control: None,
            backoff: Backoff::default(),
            then: Then::Stay,
            membership: Some(membership),
            retiring: Vec::new(),
            tasks: None,
            revoked: Vec::new(),
        };
        self.flows.insert(name.clone(), flow);
        self.set_state(&name, State::Starting, "joining the flow's group");
    }

    /// What the flow's group said: the tasks it runs from now on, or tasks it must give up.
    fn on_group(&mut self, event: GroupEvent) {
        let (name, member, owned, done) = match event {
            GroupEvent::Owned { flow, member, tasks } => (flow, member, tasks, None),
            GroupEvent::Revoking { flow, member, kept, done } => (flow, member, kept, Some(done)),
            GroupEvent::Failed { flow, member, error } => return self.group_failed(&flow, member, error),
        };
        let current = |f: &Flow| f.membership.as_ref().is_some_and(|m| m.id() == member);
        let Some(f) = self.flows.get_mut(&name).filter(|f| current(f)) else {
            let Some(done) = done else { return };
            // A membership a reload replaced leaves its group when it sees the new settings in
            // it: its tasks go on only once the flow it ran stored their positions.
            match self.flows.get_mut(&name) {
                Some(f) if f.control.is_some() && f.state.active() && f.retiring.iter().any(|m| m.id() == member) => {
                    f.revoked.push(done)
                }
                _ => {
                    let _ = done.send(());
                }
            }
            return;
        };
        let tasks = Tasks { count: f.config.tasks, owned };
        let first = f.tasks.is_none();
        if f.tasks.as_ref() == Some(&tasks) && done.is_none() {
            return;
        }
        f.tasks = Some(tasks);
        let active = f.control.is_some() && f.state.active();
        let deadline = Instant::now() + self.config.shutdown_timeout;
        if self.shutting_down {
            // Every flow is stopping for good: revoked tasks are handed on once their positions
            // are stored, as ever, and nothing starts again.
            match done {
                Some(done) if active => f.revoked.push(done),
                Some(done) => {
                    let _ = done.send(());
                }
                None => {}
            }
            return;
        }
        let then = f.then.after_tasks_changed();
        match done {
            // The flow stops, storing what the target acknowledged; the tasks go on after that.
            Some(done) if active => {
                f.revoked.push(done);
                self.stop(&name, deadline, then);
            }
            Some(done) => {
                let _ = done.send(());
                if first {
                    self.start(&name);
                }
            }
            None if active => self.stop(&name, deadline, then),
            None => {
                if first || matches!(f.state, State::Stopped) {
                    self.start(&name);
                }
            }
        }
    }

    /// The flow's membership could not join its group; it tries again by itself, so the flow
    /// only shows why (or, with `--fail-fast`, everything stops). A refused setting parks it.
    fn group_failed(&mut self, name: &str, member: u64, error: crate::cluster::ClusterError) {
        let Some(f) = self.flows.get(name) else { return };
        if f.membership.as_ref().is_none_or(|m| m.id() != member) {
            return;
        }
        let error = FlowError::from(error);
        if self.options.fail_fast {
            let reason = error.to_string();
            self.set_state(name, State::Stopped, &reason);
            self.fatal.get_or_insert(error);
            return;
        }
        if !error.is_transient() {
            let reason = error.to_string();
            // A flow still running (a reload gave it the refused setting) stores its positions
            // first, and is parked once it stopped.
            if f.control.is_some() && f.state.active() {
                let deadline = Instant::now() + self.config.shutdown_timeout;
                return self.stop(name, deadline, Then::Park(reason));
            }
            return self.park_until_config_changes(name, reason);
        }
        // While no task is known the flow cannot run; `start` waits for the group.
        let why = format!("{error}; joining the flow's group again");
        self.set_state(name, State::Waiting { until: Instant::now() }, &why);
    }

    /// Builds the flow on a thread of its own: connecting may wait for an unreachable cluster,
    /// and the other flows must not wait with it.
    fn start(&mut self, name: &str) {
        let Some(f) = self.flows.get_mut(name) else { return };
        let Some(tasks) = f.tasks.clone() else { return };
        let session = f.membership.as_ref().map(Membership::session);
        f.generation += 1;
        f.then = Then::Stay;
        let control = FlowControl::new(name, f.generation, self.ended.0.clone());
        f.control = Some(control.clone());
        let (config, flow, shared, tx, generation) =
            (self.config.clone(), f.config.clone(), self.shared.clone(), self.built.0.clone(), f.generation);
        self.set_state(name, State::Starting, "");
        let flow_name = name.to_string();
        let spawned = thread::Builder::new().name(format!("start {name}")).spawn(move || {
            let result = catch_unwind(AssertUnwindSafe(|| {
                build_flow(&config, &flow, &tasks, session.as_ref(), &shared, &control)
            }))
            .unwrap_or_else(|_| {
                Err(StageError::Thread { flow: flow.name(), stage: "set-up", what: "panicked".into() }.into())
            });
            if result.is_err() {
                shared.forget_admins(&config, &flow);
            }
            let _ = tx.send(Built { flow: flow_name, generation, result });
        });
        if let Err(e) = spawned {
            let error: FlowError =
                StageError::Thread { flow: name.to_string(), stage: "set-up", what: format!("could not start: {e}") }
                    .into();
            self.failed(name, error, Duration::ZERO);
        }
    }

    fn on_built(&mut self, b: Built) {
        let Some(f) = self.flows.get_mut(&b.flow) else {
            discard(b.result);
            return;
        };
        if f.generation != b.generation {
            discard(b.result);
            return;
        }
        let Some(control) = f.control.clone() else {
            discard(b.result);
            return;
        };
        match b.result {
            Ok(_) if control.stopping() => self.stopped(&b.flow),
            Ok(parts) => {
                self.pool.add(&control, parts.stages, parts.periodic, parts.checkpoints);
                self.set_state(&b.flow, State::Running { since: Instant::now() }, "");
            }
            Err(e) if control.stopping() => {
                tracing::debug!(flow = b.flow, error = %e, "a flow asked to stop failed to start");
                self.stopped(&b.flow);
            }
            Err(e) => self.failed(&b.flow, e, Duration::ZERO),
        }
    }

    fn on_ended(&mut self, e: FlowEnded) {
        let Some(f) = self.flows.get_mut(&e.flow) else { return };
        if f.generation != e.generation {
            return;
        }
        f.control = None;
        let ran = match f.state {
            State::Running { since } => since.elapsed(),
            _ => Duration::ZERO,
        };
        let asked = matches!(f.state, State::Stopping);
        match e.error {
            Some(error) if !asked => self.failed(&e.flow, error.into(), ran),
            _ => self.stopped(&e.flow),
        }
    }

    /// The flow failed: restart it later, park it, or (fail-fast) stop everything.
    fn failed(&mut self, name: &str, error: FlowError, ran: Duration) {
        let Some(f) = self.flows.get_mut(name) else { return };
        f.run_ended(&mut self.leaving);
        let reason = error.to_string();
        if self.options.fail_fast {
            self.set_state(name, State::Stopped, &reason);
            self.fatal.get_or_insert(error);
        } else if error.is_transient() {
            let pause = f.backoff.failed(ran);
            let why = format!("{reason}; starting again in {} s", pause.as_secs_f32());
            self.set_state(name, State::Waiting { until: Instant::now() + pause }, &why);
        } else {
            let plugin = f.config.policy_wasm.clone().map(|p| {
                let m = modified(&p);
                (p, m)
            });
            self.set_state(
                name,
                State::Parked { reason: reason.clone(), plugin },
                &format!("{reason}; parked until its config or plugin changes"),
            );
        }
    }

    /// The flow stopped as asked: then stay stopped, start again with its new config, or go.
    fn stopped(&mut self, name: &str) {
        let Some(f) = self.flows.get_mut(name) else { return };
        f.run_ended(&mut self.leaving);
        match f.then.clone() {
            Then::Restart(why) => {
                self.set_state(name, State::Stopped, why);
                self.start(name);
            }
            Then::Remove => {
                self.set_state(name, State::Stopped, "removed from the config");
                if let Some(membership) = self.flows.remove(name).and_then(|f| f.membership) {
                    membership.leave();
                    self.leaving.push(membership);
                }
            }
            Then::Stay => self.set_state(name, State::Stopped, ""),
            Then::Park(reason) => self.park_until_config_changes(name, reason),
        }
    }

    fn park_until_config_changes(&mut self, name: &str, reason: String) {
        let why = format!("{reason}; parked until its config changes");
        self.set_state(name, State::Parked { reason, plugin: None }, &why);
    }

    /// Asks a flow to stop by `deadline`; `then` says what follows.
    fn stop(&mut self, name: &str, deadline: Instant, then: Then) {
        let Some(f) = self.flows.get_mut(name) else { return };
        f.then = then;
        match (&f.state, f.control.clone()) {
            (State::Starting | State::Running { .. } | State::Stopping, Some(control)) => {
                control.stop(deadline);
                if !matches!(f.state, State::Starting) {
                    f.state = State::Stopping;
                }
            }
            _ => self.stopped(name),
        }
    }

    fn restart_due(&mut self) {
        self.leaving.retain(|m| !m.gone());
        let now = Instant::now();
        let due: Vec<String> = self
            .flows
            .iter()
            .filter(|(_, f)| matches!(f.state, State::Waiting { until } if until <= now))
            .map(|(n, _)| n.clone())
            .collect();
        for name in due {
            self.start(&name);
        }
    }

    /// Stops every flow and waits for them until the shutdown timeout, then returns anyway.
    fn shutdown(&mut self) {
        self.shutting_down = true;
        let deadline = Instant::now() + self.config.shutdown_timeout;
        let names: Vec<String> = self.flows.keys().cloned().collect();
        for f in self.flows.values() {
            if let Some(m) = &f.membership {
                m.leaving_soon();
            }
        }
        for name in &names {
            self.stop(name, deadline, Then::Stay);
        }
        while self.flows.values().any(|f| f.state.active()) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let draining: Vec<&str> =
                    self.flows.iter().filter(|(_, f)| f.state.active()).map(|(n, _)| n.as_str()).collect();
                ShutdownTimedOut { flows: &draining.join(", ") }.emit();
                return;
            }
            self.wait_for_news(left.min(TICK));
        }
        // Leaving the groups hands this process's tasks on at once, not after the session
        // timeout; a static member keeps them until it comes back or the timeout ends.
        for f in self.flows.values() {
            if let Some(m) = &f.membership {
                m.leave();
            }
        }
        let leave_by = deadline.min(Instant::now() + LEAVE_WAIT);
        while Instant::now() < leave_by
            && !self.flows.values().filter_map(|f| f.membership.as_ref()).all(Membership::gone)
        {
            thread::sleep(Duration::from_millis(20));
        }
    }
}

/// How long a stopping process waits for its group memberships to leave.
const LEAVE_WAIT: Duration = Duration::from_secs(3);

/// Drops a flow that was built too late to run, off the supervisor's thread: closing its
/// clients may wait on a broker.
fn discard(result: Result<FlowParts, FlowError>) {
    if let Ok(parts) = result {
        let _ = thread::Builder::new().name("reaper".into()).spawn(move || drop(parts));
    }
}

#[cfg(test)]
mod tests {
    use super::{Then, CONFIG_CHANGED, TASKS_CHANGED};

    #[test]
    fn a_flow_asked_only_to_stop_restarts_with_its_new_tasks() {
        assert_eq!(Then::Stay.after_tasks_changed(), Then::Restart(TASKS_CHANGED));
    }

    #[test]
    fn a_pending_removal_park_or_config_restart_outlives_a_tasks_change() {
        for pending in [Then::Remove, Then::Park("refused".into()), Then::Restart(CONFIG_CHANGED)] {
            assert_eq!(pending.after_tasks_changed(), pending);
        }
    }
}
