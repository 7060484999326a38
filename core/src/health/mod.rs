//! Liveness and readiness, for `/healthz` and `/readyz` on the metrics listener.
//!
//! Liveness: every thread of the pool says when it enters and leaves a unit of work; a thread
//! inside one unit for longer than its bound is wedged. A thread waiting for work, or a stage
//! idle because its channel is empty or full, is not inside a unit, so it counts as alive.
//! Readiness: every flow's state, as [`crate::events::FlowStateChanged`] reports it; the process
//! is ready when every flow it runs is `running` (connected to both clusters, its group joined,
//! its partitions assigned). A flow's latest transient problem ([`crate::events::FlowRetrying`])
//! is shown beside its state for [`RETRY_SHOWN`]: a flow stuck `starting` says what it waits for,
//! and a `running` flow whose cluster stopped answering says so before its state changes.
//! A cluster that has not answered a flow's own clients for a while
//! ([`crate::events::ClusterUnanswered`]) makes the flow not ready, whatever its state: it is
//! not replicating, and the body names the cluster.

mod http;
mod process;

pub use http::{serve, ServeError};

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long one step of a stage (one batch fetched, filtered, transformed or handed to the
/// producer) may take. Steps never wait for a slow cluster: they return and come back.
pub const STAGE_BOUND: Duration = Duration::from_secs(60);
/// How long one round of periodic work (discovery, config and ACL sync, heartbeats,
/// checkpoints) may take: each of its cluster requests times out within 30 s, and a round makes
/// a few.
pub const PERIODIC_BOUND: Duration = Duration::from_secs(300);
/// How long `/readyz` shows a flow's latest retry: a few of its periodic rounds, so a problem
/// that persists stays in view and one that passed goes.
pub const RETRY_SHOWN: Duration = Duration::from_secs(30);

/// One thread's liveness: when it entered its current unit of work, if it is in one.
pub struct Beat {
    name: String,
    bound: Duration,
    start: Instant,
    /// Milliseconds since the registry started, plus one; 0 while not in a unit of work.
    busy_since: AtomicU64,
}

impl Beat {
    /// The thread starts a unit of work.
    pub fn enter(&self) {
        self.busy_since.store(millis_since(self.start) + 1, Ordering::Relaxed);
    }

    /// The thread finished it.
    pub fn leave(&self) {
        self.busy_since.store(0, Ordering::Relaxed);
    }

    /// How long the thread has been inside its current unit, if it is in one.
    fn busy_for(&self, now_ms: u64) -> Option<Duration> {
        match self.busy_since.load(Ordering::Relaxed) {
            0 => None,
            since => Some(Duration::from_millis(now_ms.saturating_sub(since - 1))),
        }
    }
}

struct Registry {
    start: Instant,
    beats: Mutex<Vec<Arc<Beat>>>,
    /// Flow → (state, reason).
    flows: Mutex<BTreeMap<String, (&'static str, String)>>,
    /// Flow → (when, what) of its latest retry.
    retries: Mutex<BTreeMap<String, (Instant, String)>>,
    /// (flow, watched client) → what the cluster's silence is, while it lasts.
    unanswered: Mutex<BTreeMap<(String, u64), String>>,
}

fn millis_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::new)
}

/// Registers a thread's liveness under `name`, wedged once a unit of work passes `bound`.
pub fn beat(name: &str, bound: Duration) -> Arc<Beat> {
    registry().beat(name, bound)
}

/// Records a flow's state; a `stopped` flow (removed from the config, or the process stopping)
/// no longer counts.
pub fn flow_state(flow: &str, state: &'static str, reason: &str) {
    registry().flow_state(flow, state, reason)
}

/// Records a flow's latest transient problem, which `/readyz` shows for [`RETRY_SHOWN`].
pub fn flow_retrying(flow: &str, what: &str) {
    registry().flow_retrying(flow, what, Instant::now())
}

/// Records that a cluster has not answered client `link` of `flow` lately ([`crate::cluster::Link`]).
pub fn cluster_unanswered(flow: &str, link: u64, what: &str) {
    registry().unanswered(flow, link, Some(what))
}

/// Records that the cluster answers client `link` of `flow` again, or that the client is gone.
pub fn cluster_answered(flow: &str, link: u64) {
    registry().unanswered(flow, link, None)
}

/// `/healthz`: every thread is idle or inside a unit of work shorter than its bound.
pub fn liveness() -> Verdict {
    registry().liveness()
}

/// `/readyz`: at least one flow, and every flow `running` with its clusters answering; the body
/// names the others and why, and the running flows that retried something lately (`retrying`), which does not change the
/// verdict.
pub fn readiness() -> Verdict {
    registry().readiness(Instant::now())
}

/// A probe's answer: whether it passes, and a short JSON body saying why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// 200 when true, 503 otherwise.
    pub ok: bool,
    /// One JSON object.
    pub body: String,
}

impl Registry {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            beats: Mutex::default(),
            flows: Mutex::default(),
            retries: Mutex::default(),
            unanswered: Mutex::default(),
        }
    }

    fn beat(&self, name: &str, bound: Duration) -> Arc<Beat> {
        let beat = Arc::new(Beat { name: name.to_string(), bound, start: self.start, busy_since: AtomicU64::new(0) });
        self.beats.lock().unwrap_or_else(|p| p.into_inner()).push(beat.clone());
        beat
    }

    fn flow_state(&self, flow: &str, state: &'static str, reason: &str) {
        let mut flows = self.flows.lock().unwrap_or_else(|p| p.into_inner());
        if state == "stopped" {
            flows.remove(flow);
            self.retries.lock().unwrap_or_else(|p| p.into_inner()).remove(flow);
            self.unanswered.lock().unwrap_or_else(|p| p.into_inner()).retain(|(f, _), _| f != flow);
        } else {
            flows.insert(flow.to_string(), (state, reason.to_string()));
        }
    }

    fn flow_retrying(&self, flow: &str, what: &str, at: Instant) {
        self.retries.lock().unwrap_or_else(|p| p.into_inner()).insert(flow.to_string(), (at, what.to_string()));
    }

    fn unanswered(&self, flow: &str, link: u64, what: Option<&str>) {
        let mut unanswered = self.unanswered.lock().unwrap_or_else(|p| p.into_inner());
        match what {
            Some(what) => unanswered.insert((flow.to_string(), link), what.to_string()),
            None => unanswered.remove(&(flow.to_string(), link)),
        };
    }

    fn liveness(&self) -> Verdict {
        let now = millis_since(self.start);
        let beats = self.beats.lock().unwrap_or_else(|p| p.into_inner());
        let wedged: Vec<String> = beats
            .iter()
            .filter_map(|b| {
                b.busy_for(now).filter(|d| *d > b.bound).map(|d| {
                    format!("{}: one unit of work for {} s (bound {} s)", b.name, d.as_secs(), b.bound.as_secs())
                })
            })
            .collect();
        let body = format!(
            "{{\"alive\":{},\"wedged\":[{}]}}",
            wedged.is_empty(),
            wedged.iter().map(|w| json_string(w)).collect::<Vec<_>>().join(",")
        );
        Verdict { ok: wedged.is_empty(), body }
    }

    fn readiness(&self, now: Instant) -> Verdict {
        let flows = self.flows.lock().unwrap_or_else(|p| p.into_inner());
        let retries = self.retries.lock().unwrap_or_else(|p| p.into_inner());
        let retry = |flow: &String| {
            retries.get(flow).filter(|(at, _)| now.saturating_duration_since(*at) <= RETRY_SHOWN).map(|(_, w)| w)
        };
        let unanswered = self.unanswered.lock().unwrap_or_else(|p| p.into_inner());
        let (mut waiting, mut retrying) = (Vec::new(), Vec::new());
        for (flow, (state, reason)) in flows.iter() {
            let mut why = if reason.is_empty() { state.to_string() } else { format!("{state}: {reason}") };
            let mut silent = false;
            for (_, what) in unanswered.range((flow.clone(), 0)..=(flow.clone(), u64::MAX)) {
                why.push_str(&format!("; {what}"));
                silent = true;
            }
            if let Some(what) = retry(flow) {
                why.push_str(&format!("; retrying: {what}"));
            }
            let entry = format!("{}:{}", json_string(flow), json_string(&why));
            if *state != "running" || silent {
                waiting.push(entry);
            } else if retry(flow).is_some() {
                retrying.push(entry);
            }
        }
        let ready = !flows.is_empty() && waiting.is_empty();
        let body = format!(
            "{{\"ready\":{ready},\"flows\":{},\"not_ready\":{{{}}},\"retrying\":{{{}}}}}",
            flows.len(),
            waiting.join(","),
            retrying.join(",")
        );
        Verdict { ok: ready, body }
    }
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_inside_one_unit_past_its_bound_is_wedged_and_an_idle_one_is_not() {
        let r = Registry::new();
        let idle = r.beat("test idle", Duration::from_millis(1));
        let busy = r.beat("test busy", Duration::from_millis(20));
        idle.enter();
        idle.leave();
        busy.enter();
        assert!(r.liveness().ok, "{}", r.liveness().body);
        std::thread::sleep(Duration::from_millis(40));
        let v = r.liveness();
        assert!(!v.ok && v.body.contains("test busy") && !v.body.contains("test idle"), "{}", v.body);
        busy.leave();
        assert!(r.liveness().ok, "{}", r.liveness().body);
    }

    #[test]
    fn ready_only_when_every_flow_runs_and_the_body_says_why_not() {
        let r = Registry::new();
        assert!(!r.readiness(Instant::now()).ok, "no flow yet: not ready");
        r.flow_state("a->b", "starting", "joining the flow's group");
        r.flow_state("b->a", "running", "");
        let v = r.readiness(Instant::now());
        assert!(
            !v.ok && v.body.contains(r#""a->b":"starting: joining the flow's group""#) && !v.body.contains(r#""b->a""#),
            "{}",
            v.body
        );
        r.flow_state("a->b", "running", "");
        assert!(r.readiness(Instant::now()).ok, "{}", r.readiness(Instant::now()).body);
        r.flow_state("a->b", "stopped", "");
        assert!(
            r.readiness(Instant::now()).ok && r.readiness(Instant::now()).body.contains(r#""flows":1"#),
            "{}",
            r.readiness(Instant::now()).body
        );
    }

    #[test]
    fn a_recent_retry_is_shown_beside_the_state_and_a_stale_one_is_not() {
        let r = Registry::new();
        let t0 = Instant::now();
        r.flow_state("a->b", "starting", "");
        r.flow_state("b->a", "running", "");
        r.flow_retrying("a->b", "cluster `b` did not answer", t0);
        r.flow_retrying("b->a", "fetch: timed out", t0);
        let v = r.readiness(t0 + RETRY_SHOWN);
        assert!(!v.ok, "{}", v.body);
        assert!(
            v.body.contains(r#""not_ready":{"a->b":"starting; retrying: cluster `b` did not answer"}"#),
            "{}",
            v.body
        );
        assert!(v.body.contains(r#""retrying":{"b->a":"running; retrying: fetch: timed out"}"#), "{}", v.body);
        let later = r.readiness(t0 + RETRY_SHOWN + Duration::from_millis(1));
        assert!(later.body.contains(r#""not_ready":{"a->b":"starting"}"#) && later.body.contains(r#""retrying":{}"#));
        r.flow_state("b->a", "stopped", "");
        r.flow_state("b->a", "running", "");
        assert!(!r.readiness(t0).body.contains("fetch"), "a stopped flow's retries go with it");
    }

    #[test]
    fn a_cluster_that_stopped_answering_makes_a_running_flow_not_ready_until_it_answers() {
        let r = Registry::new();
        r.flow_state("a->b", "running", "");
        r.flow_state("c->b", "running", "");
        r.unanswered("a->b", 7, Some("cluster `b` has not answered the flow's producer for 12 s"));
        let v = r.readiness(Instant::now());
        assert!(!v.ok, "{}", v.body);
        assert!(
            v.body.contains(
                r#""not_ready":{"a->b":"running; cluster `b` has not answered the flow's producer for 12 s"}"#
            ),
            "{}",
            v.body
        );
        r.unanswered("a->b", 7, None);
        assert!(r.readiness(Instant::now()).ok, "{}", r.readiness(Instant::now()).body);
        r.unanswered("a->b", 8, Some("silent"));
        r.flow_state("a->b", "stopped", "");
        r.flow_state("a->b", "running", "");
        assert!(r.readiness(Instant::now()).ok, "a stopped flow's silences go with it");
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("a\"b\\c\n"), r#""a\"b\\c\u000a""#);
    }
}
