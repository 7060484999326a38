//! What happens to flows as units: their state, restarts, reloads and the shutdown.

use metrics::{counter, gauge};
use tracing::{error, info, warn};

/// The states a flow can be in, for the `strait_flow_state` gauge.
pub const FLOW_STATES: &[&str] = &["starting", "running", "restarting", "parked", "stopped"];

/// A flow changed state: `starting`, `running`, `restarting` (waiting out its backoff after a
/// transient failure), `parked` (a permanent failure, until its config or plugin changes) or
/// `stopped`.
pub struct FlowStateChanged<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// One of [`FLOW_STATES`].
    pub state: &'static str,
    /// Why, for a failure; what changed, otherwise.
    pub reason: &'a str,
}

impl FlowStateChanged<'_> {
    /// Logs the change and sets `strait_flow_up` and `strait_flow_state`.
    pub fn emit(&self) {
        match self.state {
            "parked" => error!(flow = self.flow, state = self.state, reason = self.reason, "flow state"),
            "restarting" => warn!(flow = self.flow, state = self.state, reason = self.reason, "flow state"),
            _ => info!(flow = self.flow, state = self.state, reason = self.reason, "flow state"),
        }
        crate::health::flow_state(self.flow, self.state, self.reason);
        let up = if self.state == "running" { 1.0 } else { 0.0 };
        gauge!("strait_flow_up", "flow" => self.flow.to_string()).set(up);
        for state in FLOW_STATES {
            let on = if *state == self.state { 1.0 } else { 0.0 };
            gauge!("strait_flow_state", "flow" => self.flow.to_string(), "state" => *state).set(on);
        }
        if self.state == "restarting" {
            counter!("strait_flow_restarts_total", "flow" => self.flow.to_string()).increment(1);
        }
        if self.state == "starting" {
            zero_counters(self.flow);
        }
    }
}

/// Registers at zero the counters alerts watch, so they exist from the start and `increase()`
/// sees their first step (a series born at 1 has no increase). Adding zero leaves a counter of
/// an earlier run of the flow as it is.
fn zero_counters(flow: &str) {
    let flow = flow.to_string();
    counter!("strait_flow_restarts_total", "flow" => flow.clone()).increment(0);
    counter!("strait_flow_retries_total", "flow" => flow.clone()).increment(0);
    counter!("strait_records_rejected_total", "flow" => flow.clone()).increment(0);
    for reason in ["provenance", "policy", "conflict"] {
        counter!("strait_records_dropped_total", "flow" => flow.clone(), "reason" => reason).increment(0);
    }
    counter!("strait_conflicts_refused_total", "flow" => flow.clone(), "outcome" => "dropped").increment(0);
    counter!("strait_conflicts_refused_total", "flow" => flow, "outcome" => "dead-lettered").increment(0);
}

/// An assignment of source partitions failed and will be tried again.
pub struct AssignRetried<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// Partitions waiting.
    pub partitions: usize,
    /// Failed attempts in a row.
    pub attempt: u32,
    /// What the consumer said.
    pub error: &'a str,
}

impl AssignRetried<'_> {
    /// Logs and counts the attempt.
    pub fn emit(&self) {
        warn!(
            flow = self.flow,
            partitions = self.partitions,
            attempt = self.attempt,
            error = self.error,
            "assigning source partitions failed; retrying"
        );
        counter!("strait_assign_retries_total", "flow" => self.flow.to_string()).increment(1);
    }
}

/// The config file was read again and applied.
pub struct ConfigReloaded<'a> {
    /// The file.
    pub path: &'a str,
    /// Flows started, stopped and restarted.
    pub added: usize,
    /// Flows stopped.
    pub removed: usize,
    /// Flows restarted with new settings.
    pub changed: usize,
}

impl ConfigReloaded<'_> {
    /// Logs and counts the reload.
    pub fn emit(&self) {
        info!(path = self.path, added = self.added, removed = self.removed, changed = self.changed, "config reloaded");
        counter!("strait_config_reloads_total", "result" => "applied").increment(1);
    }
}

/// A changed config file failed validation; the running flows are kept.
pub struct ConfigReloadRefused<'a> {
    /// The file.
    pub path: &'a str,
    /// Why.
    pub reason: &'a str,
}

impl ConfigReloadRefused<'_> {
    /// Logs and counts the refusal.
    pub fn emit(&self) {
        error!(path = self.path, reason = self.reason, "config reload refused; the running flows are kept");
        counter!("strait_config_reloads_total", "result" => "refused").increment(1);
    }
}

/// Shutdown ran out of time with flows still draining.
pub struct ShutdownTimedOut<'a> {
    /// The flows still draining.
    pub flows: &'a str,
}

impl ShutdownTimedOut<'_> {
    /// Logs the event.
    pub fn emit(&self) {
        warn!(
            flows = self.flows,
            "shutdown timeout reached; exiting with these flows still draining (their stored positions cover only what the target acknowledged)"
        );
    }
}

/// The group gave this process a new set of a flow's tasks.
pub struct TasksChanged<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// The tasks owned from now on.
    pub owned: &'a std::collections::BTreeSet<u32>,
}

impl TasksChanged<'_> {
    /// Logs the set and sets `strait_tasks_owned`.
    pub fn emit(&self) {
        let list: Vec<String> = self.owned.iter().map(u32::to_string).collect();
        info!(flow = self.flow, tasks = %list.join(","), "tasks owned");
        gauge!("strait_tasks_owned", "flow" => self.flow.to_string()).set(self.owned.len() as f64);
    }
}

/// What a flow's member found about the settings of the other members of its group.
pub struct SettingsAgreement<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// `agreed` (every member runs this one's settings), `waiting` (members with older settings
    /// are still in the group) or `yielding` (a member runs newer settings).
    pub state: &'static str,
    /// How many members run settings other than this one's.
    pub disagreeing: usize,
    /// Yielding: the client id of the member with the newest settings.
    pub newest: Option<&'a str>,
}

impl SettingsAgreement<'_> {
    /// Logs (a warning while members disagree) and sets `strait_group_members_disagreeing`
    /// and `strait_group_yielded`.
    pub fn emit(&self) {
        match self.state {
            "agreed" => info!(flow = self.flow, "every member of the flow's group runs this process's settings"),
            "waiting" => warn!(
                flow = self.flow,
                members = self.disagreeing,
                "members of the flow's group run other, older settings: this process copies nothing until they \
                 leave (reload them with this config, or stop them)"
            ),
            _ => warn!(
                flow = self.flow,
                members = self.disagreeing,
                newest = self.newest.unwrap_or("?"),
                "a member of the flow's group runs newer settings: this process hands its tasks on and copies \
                 nothing while it is there (reload it with the same config to share the work again)"
            ),
        }
        let flow = self.flow.to_string();
        gauge!("strait_group_members_disagreeing", "flow" => flow.clone()).set(self.disagreeing as f64);
        gauge!("strait_group_yielded", "flow" => flow).set(if self.state == "yielding" { 1.0 } else { 0.0 });
    }
}

/// A flow's group member went too long without an assignment and joins again with a new
/// consumer.
pub struct MembershipRejoining<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// How long it waited.
    pub waited: std::time::Duration,
}

impl MembershipRejoining<'_> {
    /// Logs a warning and counts `strait_group_rejoins_total`.
    pub fn emit(&self) {
        warn!(
            flow = self.flow,
            waited_s = self.waited.as_secs(),
            "the flow's group gave this process no assignment in time; joining again with a new member"
        );
        counter!("strait_group_rejoins_total", "flow" => self.flow.to_string()).increment(1);
    }
}

/// An exactly-once flow committed its transactions (one per owned task): the records, the
/// positions and the offset runs written since the last commit became visible together.
pub struct TransactionsCommitted<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// From the start of the commit (waiting for acknowledgements, writing positions) to the
    /// coordinator's answer.
    pub took: std::time::Duration,
}

impl TransactionsCommitted<'_> {
    /// Logs at debug level, counts `strait_transactions_committed_total` and records
    /// `strait_transaction_commit_seconds`.
    pub fn emit(&self) {
        tracing::debug!(flow = self.flow, took_ms = self.took.as_millis() as u64, "transactions committed");
        counter!("strait_transactions_committed_total", "flow" => self.flow.to_string()).increment(1);
        metrics::histogram!("strait_transaction_commit_seconds", "flow" => self.flow.to_string())
            .record(self.took.as_secs_f64());
    }
}

/// An exactly-once flow that stopped or parked with its transactions open aborted them, so
/// `read_committed` readers of the target partitions and of the position topic go on at once
/// instead of waiting out `transaction.timeout.ms`.
pub struct TransactionsAborted<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// Why they could not commit.
    pub why: &'a str,
    /// What went wrong while aborting, if anything: a lane that could not abort leaves its
    /// transaction to the coordinator's timeout or to the task's next owner, which aborts it.
    pub failure: Option<&'a str>,
}

impl TransactionsAborted<'_> {
    /// Logs at warn level and counts `strait_transactions_aborted_total`.
    pub fn emit(&self) {
        match self.failure {
            None => tracing::warn!(
                flow = self.flow,
                "{}; the open transaction was aborted and the flow resumes at its last commit",
                self.why
            ),
            Some(failure) => tracing::warn!(
                flow = self.flow,
                "{}; aborting the open transaction failed ({failure}): readers wait for its timeout, and the flow resumes at its last commit",
                self.why
            ),
        }
        counter!("strait_transactions_aborted_total", "flow" => self.flow.to_string()).increment(1);
    }
}

/// A flow's first discovery round, or its widest topic changed its partition count. Task `t`
/// replicates partitions `p % tasks.max == t`, so when that count is below `tasks.max` the
/// tasks from it up never have work, and a process the group gives only such tasks idles.
pub struct TasksIdle<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// `tasks.max`.
    pub tasks: u32,
    /// The partition count of the widest replicated topic; 0 when the flow replicates no topic.
    pub widest: i32,
    /// Whether this process owns tasks, none with a partition: only then is the line a
    /// warning. With the default `tasks.max` every small topic would otherwise warn at each
    /// start, though nothing idles until a process is given only empty tasks.
    pub only_empty_tasks_owned: bool,
}

impl TasksIdle<'_> {
    /// Sets `strait_tasks_idle` and, when some tasks can never have a partition, logs the fix
    /// (a warning when this process idles).
    pub fn emit(&self) {
        let idle = self.idle();
        // The line first: whoever sees the gauge may look for it.
        match (idle, self.only_empty_tasks_owned) {
            (0, _) => {}
            (_, false) => info!(
                flow = self.flow,
                tasks = self.tasks,
                widest_topic_partitions = self.widest,
                "{idle} of the flow's tasks can never have a partition; a process the group gives only those would idle: set `tasks.max` to at most {} before running more than one process",
                self.widest
            ),
            (_, true) => warn!(
                flow = self.flow,
                tasks = self.tasks,
                widest_topic_partitions = self.widest,
                "{idle} of the flow's tasks can never have a partition, and this process was given only those, so it reads nothing of this flow; set `tasks.max` to at most {} so every process running it gets work",
                self.widest
            ),
        }
        gauge!("strait_tasks_idle", "flow" => self.flow.to_string()).set(f64::from(idle));
    }

    /// Tasks that can never have a partition. 0 while the flow replicates no topic: then every
    /// task idles, but no `tasks.max` would change that, so there is nothing to advise.
    pub fn idle(&self) -> u32 {
        match u32::try_from(self.widest) {
            Ok(widest) if widest > 0 => self.tasks.saturating_sub(widest),
            _ => 0,
        }
    }
}

/// The flow's replication lag, reported by its fetch stage once a second.
pub struct FlowLag<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// Offsets from the next one to deliver to the cached high watermark, summed over the source
    /// partitions this process reads.
    pub records: i64,
    /// Age of the oldest record read and not yet acknowledged by the target, to the batch.
    pub seconds: f64,
}

impl FlowLag<'_> {
    /// Sets `strait_flow_lag_records` and `strait_flow_lag_seconds`.
    pub fn emit(&self) {
        tracing::trace!(flow = self.flow, records = self.records, seconds = self.seconds, "lag");
        gauge!("strait_flow_lag_records", "flow" => self.flow.to_string()).set(self.records as f64);
        gauge!("strait_flow_lag_seconds", "flow" => self.flow.to_string()).set(self.seconds);
    }
}

#[cfg(test)]
mod tests {
    use super::TasksIdle;

    fn idle(tasks: u32, widest: i32) -> u32 {
        TasksIdle { flow: "us-east->us-west", tasks, widest, only_empty_tasks_owned: false }.idle()
    }

    #[test]
    fn tasks_beyond_the_widest_topic_idle() {
        assert_eq!(idle(12, 6), 6);
        assert_eq!(idle(12, 1), 11);
    }

    #[test]
    fn no_task_idles_once_the_widest_topic_reaches_tasks_max() {
        assert_eq!(idle(6, 6), 0);
        assert_eq!(idle(6, 40), 0);
    }

    #[test]
    fn a_flow_with_no_topic_reports_no_idle_task() {
        assert_eq!(idle(12, 0), 0);
        assert_eq!(idle(12, -1), 0);
    }
}
