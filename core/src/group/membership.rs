//! A flow's membership in its group: a consumer on the target that never reads a record, only
//! joins, stays and is told which tasks are its own.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaResult;
use rdkafka::ClientContext;

use super::agreement::{agreement, Agreement, Stamp};
use super::GroupSession;
use crate::clock::now_millis;
use crate::cluster::{check_reachable, create_client, ClusterAdmin, ClusterError, TopicSpec, REACH_TIMEOUT};
use crate::config::{Config, FlowConfig};
use crate::events::{FlowRetrying, MembershipRejoining, SettingsAgreement, TasksChanged};

/// The longest the membership thread waits in its consumer's poll (which keeps it in the
/// group). A rebalance ends the wait at once; leaving would wait it out, so a stopping process
/// shortens it first. Every flow has a membership thread, and a 100 ms wait was a fifth of an
/// idle flow's wake-ups.
const POLL: Duration = Duration::from_secs(1);
/// The poll's wait once the process is about to leave (see [`Membership::leaving_soon`]).
const POLL_LEAVING: Duration = Duration::from_millis(50);
/// How long to wait before trying again to set up the membership.
const RETRY: Duration = Duration::from_secs(2);
/// What the rebalance timeout leaves a member beyond storing its revoked tasks' positions.
const REJOIN_SLACK: Duration = Duration::from_secs(15);
/// How often a member in its group looks at the other members' settings beside every
/// rebalance (a member joining always brings one; this catches what a rebalance missed).
const CHECK_EVERY: Duration = Duration::from_secs(5);
/// How often a member that yielded to newer settings looks whether they are still there.
const CHECK_YIELDED: Duration = Duration::from_secs(2);
/// The longest a look at the group's members may take.
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a member may go without an assignment (after joining, or after a revocation or
/// a lost assignment) before it gives up on its consumer and joins with a new one. librdkafka
/// calls the assignment callback after every completed rebalance, even one that gives this
/// member nothing, and a rebalance ends within the rebalance timeout (the coordinator drops
/// members that did not rejoin by then), after at most `revoke_wait` of this member storing
/// its positions. Waiting twice that and a session more is only ever reached by a consumer
/// stuck rejoining: one seen after its coordinator was frozen past the session timeout never
/// joined again while the same flow's other clients recovered.
fn stuck_after(revoke_wait: Duration, session: Duration) -> Duration {
    rebalance_timeout(revoke_wait, session) * 2 + session
}

/// The rebalance timeout (`max.poll.interval.ms`, which librdkafka sends as such): how long the
/// coordinator waits for every member to rejoin once a rebalance began. A member stores its
/// revoked tasks' positions (at most `revoke_wait`) before it rejoins, so it needs that much;
/// and a member that died without leaving (killed while its target was frozen, say) holds
/// every other member's tasks back that long, so it should be no more: librdkafka's default is
/// five minutes.
fn rebalance_timeout(revoke_wait: Duration, session: Duration) -> Duration {
    (revoke_wait + REJOIN_SLACK).max(session)
}

/// Which tasks of a flow this process runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tasks {
    /// `tasks.max`: how many tasks the flow has.
    pub count: u32,
    /// The tasks this process owns.
    pub owned: BTreeSet<u32>,
}

impl Tasks {
    /// Every task of a flow run by a single process (no group).
    pub fn all(count: u32) -> Self {
        Self { count, owned: (0..count.max(1)).collect() }
    }

    /// Whether source partition `partition` (of any topic) belongs to an owned task.
    ///
    /// ```
    /// use strait_core::group::Tasks;
    /// let t = Tasks { count: 4, owned: [1, 2].into() };
    /// assert!(t.owns_partition(1) && t.owns_partition(6) && !t.owns_partition(4));
    /// ```
    pub fn owns_partition(&self, partition: i32) -> bool {
        self.owned.contains(&(partition.rem_euclid(self.count.max(1) as i32) as u32))
    }

    /// Whether this process owns tasks and none of them can have a partition of a topic that
    /// has `widest` partitions (the flow's widest): it runs the flow and reads nothing. A process
    /// that owns no task (its group membership lost, say) is not idling for want of partitions.
    ///
    /// ```
    /// use strait_core::group::Tasks;
    /// assert!(!Tasks { count: 12, owned: [2, 9].into() }.only_empty(3));
    /// assert!(Tasks { count: 12, owned: [6, 11].into() }.only_empty(6));
    /// assert!(!Tasks { count: 12, owned: [].into() }.only_empty(6));
    /// ```
    pub fn only_empty(&self, widest: i32) -> bool {
        !self.owned.is_empty() && self.owned.iter().all(|&task| i64::from(task) >= i64::from(widest))
    }

    /// Whether this process does the flow's once-only work (heartbeats, checkpoints, group
    /// offset sync): the owner of task 0.
    pub fn leads(&self) -> bool {
        self.owned.contains(&0)
    }
}

/// What the group told a flow's membership.
#[derive(Debug)]
pub enum GroupEvent {
    /// The tasks this process now owns (after a rebalance).
    Owned {
        /// `source->target`.
        flow: String,
        /// Which membership of the flow says so (a reload that changes the flow joins anew).
        member: u64,
        /// The tasks owned from now on.
        tasks: BTreeSet<u32>,
    },
    /// The coordinator takes these tasks away: the flow must stop sending for them and store
    /// its positions, then send on `done`; only then are they handed to another member.
    Revoking {
        /// `source->target`.
        flow: String,
        /// Which membership of the flow says so.
        member: u64,
        /// The tasks kept.
        kept: BTreeSet<u32>,
        /// Told when the flow stored its positions.
        done: Sender<()>,
    },
    /// Joining failed (the target unreachable, say); the membership tries again by itself,
    /// unless librdkafka refused a setting (`ClusterError::BadSetting`): then it has ended.
    Failed {
        /// `source->target`.
        flow: String,
        /// Which membership of the flow says so.
        member: u64,
        /// Why.
        error: ClusterError,
    },
}

/// A running membership; dropping it leaves the group (a static member does not leave: its
/// tasks wait for it for the session timeout, which keeps a rolling restart from moving them).
pub struct Membership {
    id: u64,
    session: Arc<GroupSession>,
    stop: Arc<Leave>,
    handle: Option<JoinHandle<()>>,
}

/// Asks a membership's thread to leave the group, or to be ready to soon.
#[derive(Default)]
struct Leave {
    /// Leave now.
    now: AtomicBool,
    /// The process is stopping: poll briefly, so that leaving, once asked, is not held up by a
    /// poll's long wait.
    soon: AtomicBool,
    /// A reload replaced the membership: what it finds about the group's settings is no longer
    /// the flow's, and must not overwrite what its successor said.
    retired: AtomicBool,
}

/// Numbers memberships, so events of one a reload replaced are told apart.
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Membership {
    /// Joins the group of `flow` in a thread of its own, reporting to `events`. `revoke_wait`
    /// bounds how long a revocation waits for the flow to store its positions.
    pub fn start(config: &Config, flow: &FlowConfig, events: Sender<GroupEvent>, revoke_wait: Duration) -> Self {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let stamp = Stamp { since: now_millis().max(0) as u64, settings: flow.fingerprint(config) };
        let stop = Arc::new(Leave::default());
        let session = GroupSession::new(tasks_topic(flow));
        let (config, flow, stop_flag, member_session) = (config.clone(), flow.clone(), stop.clone(), session.clone());
        let handle = thread::Builder::new()
            .name(format!("group {}", flow.name()))
            .spawn(move || {
                while !stop_flag.now.load(Ordering::Relaxed) {
                    let result = member(&config, &flow, id, stamp, &events, revoke_wait, &stop_flag, &member_session);
                    member_session.set(None, BTreeSet::new());
                    if let Err(error) = result {
                        // librdkafka checks settings as the client is made: the same ones are
                        // refused at every try, and a config that changes them joins anew.
                        let refused = matches!(error, ClusterError::BadSetting { .. });
                        let _ = events.send(GroupEvent::Failed { flow: flow.name(), member: id, error });
                        if refused {
                            break;
                        }
                        thread::sleep(RETRY);
                    }
                }
            })
            .ok();
        Self { id, stop, handle, session }
    }

    /// The membership as the coordinator knows it, for fencing the flow's position writes.
    pub fn session(&self) -> Arc<GroupSession> {
        self.session.clone()
    }

    /// Which membership this is, as its events say.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Starts leaving the group (a static member only stops heartbeating); the thread ends once
    /// the coordinator answered, see [`Membership::gone`].
    pub fn leave(&self) {
        self.stop.now.store(true, Ordering::Relaxed);
    }

    /// A reload replaced this membership: it stays until the flow stored its positions, but
    /// says nothing more about the group's settings (its successor does).
    pub fn retire(&self) {
        self.stop.retired.store(true, Ordering::Relaxed);
    }

    /// The process is stopping and will ask the membership to leave once its flow stopped.
    pub fn leaving_soon(&self) {
        self.stop.soon.store(true, Ordering::Relaxed);
    }

    /// Whether the membership's thread has ended.
    pub fn gone(&self) -> bool {
        self.handle.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.stop.now.store(true, Ordering::Relaxed);
    }
}

/// The group id of a flow on its target cluster, named by what the flow's positions are keyed
/// by: its source, its target and its position topic. Every process storing positions there is
/// a member, whatever else its config says; members whose settings differ settle which copies
/// (see [`super::agreement`]). A separate replicator of the same two clusters needs a position
/// topic of its own (`offset.storage.topic`).
///
/// ```
/// let flow = &strait_core::config::Config::parse(
///     "clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\na->b.enabled = true\n",
/// ).unwrap().flows[0];
/// assert_eq!(strait_core::group::group_id(flow), "strait.a->b.strait-offsets.a.internal");
/// ```
pub fn group_id(flow: &FlowConfig) -> String {
    format!("strait.{}->{}.{}", flow.source, flow.target, flow.positions_topic)
}

/// The topic whose partitions stand for the flow's tasks.
pub fn tasks_topic(flow: &FlowConfig) -> String {
    format!("strait-tasks.{}.{}.{}.internal", flow.source, flow.target, flow.tasks)
}

struct Context {
    flow: String,
    member: u64,
    events: Sender<GroupEvent>,
    revoke_wait: Duration,
    /// Set when the process leaves: the revocation that leaving brings waits for nobody.
    leaving: Arc<Leave>,
    session: Arc<GroupSession>,
    /// Since when the member has waited for an assignment; `None` while it holds one.
    unassigned_since: Mutex<Option<Instant>>,
    /// Whether every member runs this one's settings, as last seen: only then does the flow
    /// learn of the tasks the group gives it.
    copies: AtomicBool,
    /// A rebalance ended: the flow is told its tasks once the members' settings were looked at.
    rebalanced: AtomicBool,
}

impl Context {
    fn waiting_since(&self, since: Option<Instant>) {
        *self.unassigned_since.lock().unwrap_or_else(|p| p.into_inner()) = since;
    }

    /// How long the member has waited for an assignment.
    fn waited(&self) -> Duration {
        self.unassigned_since.lock().unwrap_or_else(|p| p.into_inner()).map_or(Duration::ZERO, |t| t.elapsed())
    }
}

impl ClientContext for Context {}

impl ConsumerContext for Context {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(revoked) = rebalance else { return };
        // Every revocation is followed by an assignment (at once, or after the rejoin).
        self.waiting_since(Some(Instant::now()));
        // A cooperative revocation comes with the new generation already given: the positions
        // stored now are this member's to store. A lost assignment's are not: this process is
        // no member any more, and whoever owns its tasks now may have stored newer ones.
        // The revoked tasks stay the member's until the flow stored their positions.
        self.session.set(if consumer.assignment_lost() { None } else { consumer.group_metadata() }, owned(consumer));
        if self.leaving.now.load(Ordering::Relaxed) {
            return;
        }
        let gone: BTreeSet<u32> = revoked.elements().iter().map(|e| e.partition() as u32).collect();
        let kept: BTreeSet<u32> = if self.copies.load(Ordering::Relaxed) {
            owned(consumer).into_iter().filter(|t| !gone.contains(t)).collect()
        } else {
            BTreeSet::new()
        };
        let (done, stored) = crossbeam_channel::bounded(1);
        if self.events.send(GroupEvent::Revoking { flow: self.flow.clone(), member: self.member, kept, done }).is_ok() {
            // Handing the tasks on before the positions are stored would make the new owner
            // re-send what this one already delivered; past the bound it is only that.
            if stored.recv_timeout(self.revoke_wait).is_err() {
                FlowRetrying {
                    flow: &self.flow,
                    what: "tasks handed on before the flow stored its positions; the new owner re-sends what it had not stored",
                }
                .emit();
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Error(_) => {
                self.waiting_since(Some(Instant::now()));
                return self.session.set(None, BTreeSet::new());
            }
            Rebalance::Assign(_) => {
                self.waiting_since(None);
                // The tasks topic holds no record; paused, its partitions cost no long-poll
                // fetch every `fetch.wait.max.ms`, which idle flows otherwise pay for nothing.
                if let Ok(assigned) = consumer.assignment() {
                    if let Err(e) = consumer.pause(&assigned) {
                        FlowRetrying { flow: &self.flow, what: &format!("pausing the tasks topic's fetches: {e}") }
                            .emit();
                    }
                }
                self.session.set(consumer.group_metadata(), owned(consumer))
            }
            // After a lost assignment the consumer's member id is already reset: nothing valid
            // to record until the next assignment.
            Rebalance::Revoke(_) if consumer.assignment_lost() => self.session.set(None, BTreeSet::new()),
            Rebalance::Revoke(_) => self.session.retain(owned(consumer)),
        }
        TasksChanged { flow: &self.flow, owned: &owned(consumer) }.emit();
        self.rebalanced.store(true, Ordering::Relaxed);
    }
}

fn owned(consumer: &BaseConsumer<Context>) -> BTreeSet<u32> {
    consumer.assignment().map(|tpl| tpl.elements().iter().map(|e| e.partition() as u32).collect()).unwrap_or_default()
}

/// One membership: prepares the tasks topic, joins, and polls until stopped.
#[allow(clippy::too_many_arguments)]
fn member(
    config: &Config,
    flow: &FlowConfig,
    id: u64,
    stamp: Stamp,
    events: &Sender<GroupEvent>,
    revoke_wait: Duration,
    stop: &Arc<Leave>,
    session: &Arc<GroupSession>,
) -> Result<(), ClusterError> {
    let context = Context {
        flow: flow.name(),
        member: id,
        events: events.clone(),
        revoke_wait,
        leaving: stop.clone(),
        session: session.clone(),
        unassigned_since: Mutex::new(Some(Instant::now())),
        copies: AtomicBool::new(false),
        rebalanced: AtomicBool::new(false),
    };
    let (consumer, static_member) = group_consumer(config, flow, stamp, revoke_wait, context)?;
    let mut settle = Settle {
        stamp,
        flow: flow.name(),
        group: group_id(flow),
        topic: tasks_topic(flow),
        target: flow.target.to_string(),
        member: id,
        events: events.clone(),
        seen: None,
        checked: None,
        yielded: false,
        leave: stop.clone(),
    };
    settle.join(&consumer)?;
    let stuck_after = stuck_after(revoke_wait, flow.group_session_timeout);
    while !stop.now.load(Ordering::Relaxed) {
        // The topic holds no record: polling only serves the group protocol and the callbacks.
        let wait = if stop.soon.load(Ordering::Relaxed) { POLL_LEAVING } else { POLL };
        if let Some(Err(e)) = consumer.poll(wait) {
            FlowRetrying { flow: &flow.name(), what: &format!("cluster `{}`: group membership: {e}", flow.target) }
                .emit();
        }
        settle.after_poll(&consumer)?;
        // A member that yielded waits outside the group on purpose.
        let waited = consumer.context().waited();
        if !settle.yielded && waited > stuck_after {
            MembershipRejoining { flow: &flow.name(), waited }.emit();
            break;
        }
    }
    if !static_member && !settle.yielded {
        consumer.unsubscribe();
    }
    Ok(())
}

/// Prepares the flow's tasks topic and makes the consumer that is the flow's member of its
/// group, not yet subscribed; `true` with it for a static member.
fn group_consumer(
    config: &Config,
    flow: &FlowConfig,
    stamp: Stamp,
    revoke_wait: Duration,
    context: Context,
) -> Result<(BaseConsumer<Context>, bool), ClusterError> {
    let target = config.cluster(&flow.target).ok_or_else(|| ClusterError::Client {
        alias: flow.target.to_string(),
        what: "looking up the cluster".into(),
        reason: "not in `clusters`".into(),
    })?;
    let admin = ClusterAdmin::connect(target, &flow.target_admin)?;
    check_reachable(&admin, target, REACH_TIMEOUT)?;
    admin.ensure_exists(&TopicSpec {
        name: tasks_topic(flow),
        partitions: flow.tasks as i32,
        replication_factor: flow.offset_storage_replication_factor,
        configs: Vec::new(),
    })?;
    // Its threads are not needed while the member stays in the group.
    drop(admin);
    let session_ms = flow.group_session_timeout.as_millis().to_string();
    let rebalance_ms = rebalance_timeout(revoke_wait, flow.group_session_timeout).as_millis().to_string();
    let group = group_id(flow);
    let client_id = stamp.client_id(&flow.name());
    let mut forced: Vec<(&str, &str)> = vec![
        ("group.id", &group),
        ("client.id", &client_id),
        ("partition.assignment.strategy", "cooperative-sticky"),
        ("session.timeout.ms", &session_ms),
        ("max.poll.interval.ms", &rebalance_ms),
        ("enable.auto.commit", "false"),
        ("enable.partition.eof", "false"),
    ];
    let instance = config.group_instance_id.as_ref().map(|id| format!("{id}.{}", flow.name()));
    if let Some(id) = &instance {
        forced.push(("group.instance.id", id));
    }
    let consumer = create_client(target, &flow.target_admin, "group member", &[], &forced, context)?;
    Ok((consumer, instance.is_some()))
}

/// A member's view of its group's settings: when it last looked and what it found, and what
/// it tells its flow.
struct Settle {
    stamp: Stamp,
    flow: String,
    group: String,
    /// The tasks topic the member subscribes to.
    topic: String,
    /// The target's alias, for errors.
    target: String,
    member: u64,
    events: Sender<GroupEvent>,
    seen: Option<Agreement>,
    checked: Option<Instant>,
    /// The member left its group to newer settings and stays out while they are there.
    yielded: bool,
    leave: Arc<Leave>,
}

impl Settle {
    /// Joins the group, or joins it again after yielding.
    fn join(&self, consumer: &BaseConsumer<Context>) -> Result<(), ClusterError> {
        consumer.subscribe(&[&self.topic]).map_err(|e| ClusterError::Client {
            alias: self.target.clone(),
            what: format!("joining the group `{}`", self.group),
            reason: e.to_string(),
        })
    }

    /// After each poll: a member that yielded joins again once no newer settings are in the
    /// group; any other looks at the settings after a rebalance or every [`CHECK_EVERY`], and
    /// then yields, or tells the flow the tasks it may copy (none while it waits).
    fn after_poll(&mut self, consumer: &BaseConsumer<Context>) -> Result<(), ClusterError> {
        if self.yielded {
            if self.due(CHECK_YIELDED) && self.check(consumer).is_some_and(|a| !matches!(a, Agreement::Yielding { .. }))
            {
                self.yielded = false;
                consumer.context().waiting_since(Some(Instant::now()));
                self.join(consumer)?;
            }
            return Ok(());
        }
        let rebalanced = consumer.context().rebalanced.swap(false, Ordering::Relaxed);
        if !rebalanced && !self.due(CHECK_EVERY) {
            return Ok(());
        }
        match self.check(consumer) {
            Some(Agreement::Yielding { .. }) => {
                // Leaving revokes every task: the flow stores its positions first, as for any
                // revocation, and the newer member's flow takes them on from there.
                consumer.context().copies.store(false, Ordering::Relaxed);
                consumer.unsubscribe();
                self.yielded = true;
            }
            Some(found) => {
                consumer.context().copies.store(found.copies(), Ordering::Relaxed);
                let tasks = if found.copies() { owned(consumer) } else { BTreeSet::new() };
                if !self.leave.now.load(Ordering::Relaxed) {
                    let _ = self.events.send(GroupEvent::Owned { flow: self.flow.clone(), member: self.member, tasks });
                }
            }
            // Looked at again after the next poll; until then the flow keeps what it runs.
            None => consumer.context().rebalanced.store(true, Ordering::Relaxed),
        }
        Ok(())
    }

    /// Whether `every` passed since the last look.
    fn due(&self, every: Duration) -> bool {
        self.checked.is_none_or(|t| t.elapsed() >= every)
    }

    /// Looks at the group's members; `None` when they could not be read (said as a retry).
    fn check(&mut self, consumer: &BaseConsumer<Context>) -> Option<Agreement> {
        self.checked = Some(Instant::now());
        match members(consumer, &self.group) {
            Ok(members) => {
                let found = agreement(self.stamp, &members);
                if self.seen != Some(found) && !self.leave.retired.load(Ordering::Relaxed) {
                    let (state, newest) = match found {
                        Agreement::Agreed => ("agreed", None),
                        Agreement::Waiting { .. } => ("waiting", None),
                        Agreement::Yielding { newest, .. } => ("yielding", Some(newest.client_id(&self.flow))),
                    };
                    SettingsAgreement {
                        flow: &self.flow,
                        state,
                        disagreeing: found.disagreeing(),
                        newest: newest.as_deref(),
                    }
                    .emit();
                    self.seen = Some(found);
                }
                Some(found)
            }
            Err(e) => {
                let what = format!("cluster `{}`: reading the settings of the group's members: {e}", self.target);
                FlowRetrying { flow: &self.flow, what: &what }.emit();
                None
            }
        }
    }
}

/// The stamps of the members of `group` (`None` for a client that is not a strait member).
fn members(consumer: &BaseConsumer<Context>, group: &str) -> KafkaResult<Vec<Option<Stamp>>> {
    let list = consumer.fetch_group_list(Some(group), DESCRIBE_TIMEOUT)?;
    Ok(list
        .groups()
        .iter()
        .filter(|g| g.name() == group)
        .flat_map(|g| g.members())
        .map(|m| Stamp::parse(m.client_id()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_gives_up_only_after_any_rebalance_it_could_be_in_had_ended() {
        let (revoke_wait, session) = (Duration::from_secs(30), Duration::from_secs(10));
        assert_eq!(rebalance_timeout(revoke_wait, session), Duration::from_secs(45));
        // Storing the revoked tasks' positions, then the longest the coordinator waits for
        // the others: an assignment comes by then unless the consumer is stuck.
        assert!(stuck_after(revoke_wait, session) > revoke_wait + rebalance_timeout(revoke_wait, session) + session);
        assert_eq!(stuck_after(revoke_wait, session), Duration::from_secs(100));
        // A session longer than the revocation wait bounds the rebalance instead.
        assert_eq!(rebalance_timeout(Duration::from_secs(1), Duration::from_secs(60)), Duration::from_secs(60));
    }
}
