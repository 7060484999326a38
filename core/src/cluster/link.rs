//! Whether a cluster still answers a flow's own clients: read from each client's librdkafka
//! statistics, so `/readyz` names a link that went silent while the flow is still `running`
//! (a blackholed link keeps its connections open, and librdkafka only gives up on a request
//! after its socket timeout, a minute later).
//!
//! A broker counts as silent from the first statistics round at which requests to it waited
//! and nothing came back, until something comes back: a request that times out, and the
//! reconnection that follows, end no silence. A broker the client stopped asking anything for
//! [`FORGOTTEN`] is not silent any more, so an idle flow never looks unreachable.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::consumer::ConsumerContext;
use serde::Deserialize;

use crate::events::{ClusterAnswered, ClusterUnanswered};

/// How often librdkafka hands a watched client's statistics over: the setting every watched
/// client carries among its defaults (an operator who sets `statistics.interval.ms = 0` turns
/// the watch off for that client).
pub const WATCHED: (&str, &str) = ("statistics.interval.ms", "1000");

/// How long requests may wait with no answer before the cluster counts as not answering: ten
/// long polls of an idle source, and well past one round trip of any link strait crosses.
pub const SILENCE: Duration = Duration::from_secs(10);

/// How long a silent broker may have nothing waiting before its silence is forgotten: longer
/// than librdkafka's longest reconnect backoff (10 s), during which a broker of a link that
/// still drops everything has nothing in flight.
pub const FORGOTTEN: Duration = Duration::from_secs(30);

/// One broker as a client's statistics describe it (the fields the watch reads).
#[derive(Debug, Clone, Deserialize)]
pub struct BrokerSample {
    /// Responses received from it, ever.
    pub rx: u64,
    /// Bytes received from it, ever: a long response still arriving counts as an answer.
    pub rxbytes: u64,
    /// Requests queued for it.
    pub outbuf_cnt: i64,
    /// Requests sent to it and not yet answered.
    pub waitresp_cnt: i64,
}

impl BrokerSample {
    fn waiting(&self) -> bool {
        self.outbuf_cnt > 0 || self.waitresp_cnt > 0
    }
}

#[derive(Deserialize)]
struct Statistics {
    #[serde(default)]
    brokers: HashMap<String, BrokerSample>,
}

/// The brokers in one statistics document, by name; `None` if it is not one.
pub fn brokers_in(statistics: &[u8]) -> Option<HashMap<String, BrokerSample>> {
    serde_json::from_slice::<Statistics>(statistics).ok().map(|s| s.brokers)
}

/// What the watch concluded: some brokers had requests waiting without an answer for at
/// least [`SILENCE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Silence {
    /// Brokers silent that long.
    pub silent: usize,
    /// Brokers the client knows.
    pub of: usize,
    /// The longest of their silences.
    pub longest: Duration,
}

#[derive(Debug)]
struct Heard {
    received: (u64, u64),
    /// When the broker's current silence started: the last sample before requests began to
    /// wait on it without an answer.
    silent_since: Option<u64>,
    /// While silent, since when nothing has been waiting on it.
    idle_since: Option<u64>,
    last_seen: u64,
}

/// One client's brokers over time: pure, fed a sample at a time.
#[derive(Debug, Default)]
pub struct LinkWatch {
    brokers: HashMap<String, Heard>,
}

impl LinkWatch {
    /// Takes the brokers a client's statistics listed at `now_ms` and says whether some have
    /// been silent for `bound` or more. Brokers no longer listed are forgotten.
    pub fn observe(
        &mut self,
        now_ms: u64,
        brokers: &HashMap<String, BrokerSample>,
        bound: Duration,
    ) -> Option<Silence> {
        let bound = u64::try_from(bound.as_millis()).unwrap_or(u64::MAX);
        let forgotten = u64::try_from(FORGOTTEN.as_millis()).unwrap_or(u64::MAX);
        let (mut silent, mut longest) = (0, 0);
        for (name, sample) in brokers {
            let received = (sample.rx, sample.rxbytes);
            let heard = self.brokers.entry(name.clone()).or_insert(Heard {
                received,
                silent_since: None,
                idle_since: None,
                last_seen: now_ms,
            });
            if heard.received != received {
                // Any answer ends a silence.
                heard.silent_since = None;
                heard.idle_since = None;
            } else if sample.waiting() {
                // Silent since the last time it was known to be fine: the previous sample, or this
                // one for a broker first seen waiting.
                heard.silent_since.get_or_insert(heard.last_seen.min(now_ms));
                heard.idle_since = None;
            } else if heard.silent_since.is_some() {
                // Nothing waiting and nothing heard: a request timed out, or the client stopped
                // asking; only the latter, for long, ends the silence.
                let idle = *heard.idle_since.get_or_insert(now_ms);
                if now_ms.saturating_sub(idle) >= forgotten {
                    heard.silent_since = None;
                    heard.idle_since = None;
                }
            }
            heard.received = received;
            heard.last_seen = now_ms;
            if let Some(since) = heard.silent_since {
                let quiet = now_ms.saturating_sub(since);
                if quiet >= bound {
                    silent += 1;
                    longest = longest.max(quiet);
                }
            }
        }
        self.brokers.retain(|name, _| brokers.contains_key(name));
        (silent > 0).then(|| Silence { silent, of: brokers.len(), longest: Duration::from_millis(longest) })
    }
}

/// One watched client of a flow: turns its statistics into [`ClusterUnanswered`] and
/// [`ClusterAnswered`] events, which `/readyz` reads. Dropping it (the client goes) takes its
/// silence out of `/readyz`.
pub struct Link {
    flow: String,
    cluster: String,
    client: &'static str,
    id: u64,
    started: Instant,
    watch: Mutex<LinkWatch>,
    silent: AtomicBool,
}

impl Link {
    /// The watch of `flow`'s `client` (`consumer`, `producer`) of `cluster`.
    pub fn new(flow: &str, cluster: &str, client: &'static str) -> Self {
        static IDS: AtomicU64 = AtomicU64::new(0);
        Self {
            flow: flow.to_string(),
            cluster: cluster.to_string(),
            client,
            id: IDS.fetch_add(1, Ordering::Relaxed),
            started: Instant::now(),
            watch: Mutex::default(),
            silent: AtomicBool::new(false),
        }
    }

    /// Takes one statistics document of the client.
    pub fn observe(&self, statistics: &[u8]) {
        let Some(brokers) = brokers_in(statistics) else { return };
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let verdict = self.watch.lock().unwrap_or_else(|p| p.into_inner()).observe(now, &brokers, SILENCE);
        let event = |silence: Option<Silence>| ClusterUnanswered {
            flow: &self.flow,
            cluster: &self.cluster,
            client: self.client,
            link: self.id,
            silence: silence.map(|s| (s.silent, s.of, s.longest)),
        };
        match verdict {
            Some(silence) => {
                let first = !self.silent.swap(true, Ordering::Relaxed);
                event(Some(silence)).emit(first);
            }
            None if self.silent.swap(false, Ordering::Relaxed) => {
                ClusterAnswered { flow: &self.flow, cluster: &self.cluster, client: self.client, link: self.id }.emit()
            }
            None => {}
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if self.silent.load(Ordering::Relaxed) {
            crate::health::cluster_answered(&self.flow, self.id);
        }
    }
}

/// The context of a watched consumer: librdkafka's defaults, and its statistics to a [`Link`].
pub struct WatchedConsumer(pub Link);

impl ClientContext for WatchedConsumer {
    fn stats_raw(&self, statistics: &[u8]) {
        self.0.observe(statistics);
    }
}

impl ConsumerContext for WatchedConsumer {}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn broker(rx: u64, waiting: i64) -> BrokerSample {
        BrokerSample { rx, rxbytes: rx * 100, outbuf_cnt: 0, waitresp_cnt: waiting }
    }

    fn one(rx: u64, waiting: i64) -> HashMap<String, BrokerSample> {
        HashMap::from([("b1".to_string(), broker(rx, waiting))])
    }

    const BOUND: Duration = Duration::from_secs(10);

    #[test]
    fn requests_waiting_with_no_answer_for_the_bound_are_silence_counted_from_the_last_good_sample() {
        let mut w = LinkWatch::default();
        assert_eq!(w.observe(0, &one(5, 1), BOUND), None);
        assert_eq!(w.observe(1_000, &one(6, 1), BOUND), None, "it answered");
        assert_eq!(w.observe(2_000, &one(6, 1), BOUND), None, "one second without an answer");
        assert_eq!(w.observe(10_999, &one(6, 2), BOUND), None, "9.999 s since the last answer");
        assert_eq!(
            w.observe(11_000, &one(6, 2), BOUND),
            Some(Silence { silent: 1, of: 1, longest: Duration::from_secs(10) })
        );
        assert_eq!(w.observe(12_000, &one(7, 2), BOUND), None, "an answer ends it");
    }

    #[test]
    fn bytes_still_arriving_count_as_an_answer() {
        let mut w = LinkWatch::default();
        let slow = |bytes| {
            HashMap::from([("b1".to_string(), BrokerSample { rx: 3, rxbytes: bytes, outbuf_cnt: 1, waitresp_cnt: 1 })])
        };
        for (t, bytes) in (0..30).map(|s| (s * 1_000, s * 4_096)) {
            assert_eq!(w.observe(t, &slow(bytes), BOUND), None, "at {t} ms");
        }
    }

    #[test]
    fn a_broker_with_nothing_to_ask_is_not_silent_however_quiet() {
        let mut w = LinkWatch::default();
        for t in 0..60 {
            assert_eq!(w.observe(t * 1_000, &one(1, 0), BOUND), None);
        }
        // Requests queue up: silence counts from the last sample that had nothing waiting (59 s).
        assert_eq!(w.observe(61_000, &one(1, 1), BOUND), None);
        assert!(w.observe(68_999, &one(1, 1), BOUND).is_none());
        assert!(w.observe(69_000, &one(1, 1), BOUND).is_some());
    }

    #[test]
    fn only_the_silent_brokers_count_and_gone_brokers_are_forgotten() {
        let mut w = LinkWatch::default();
        let two = |a: u64, b: u64| HashMap::from([("a".to_string(), broker(a, 1)), ("b".to_string(), broker(b, 1))]);
        w.observe(0, &two(1, 1), BOUND);
        assert_eq!(
            w.observe(20_000, &two(2, 1), BOUND),
            Some(Silence { silent: 1, of: 2, longest: Duration::from_secs(20) })
        );
        w.observe(21_000, &one(9, 1), BOUND);
        assert_eq!(w.brokers.len(), 1);
    }

    #[test]
    fn a_request_that_timed_out_does_not_end_the_silence_but_a_client_that_stopped_asking_does() {
        let mut w = LinkWatch::default();
        assert_eq!(w.observe(0, &one(5, 0), BOUND), None);
        assert_eq!(w.observe(1_000, &one(5, 3), BOUND), None);
        // The requests time out and the connection is torn down: nothing waits for a moment.
        assert_eq!(w.observe(2_000, &one(5, 0), BOUND), None);
        assert_eq!(w.observe(3_000, &one(5, 1), BOUND), None);
        assert_eq!(
            w.observe(10_000, &one(5, 0), BOUND),
            Some(Silence { silent: 1, of: 1, longest: Duration::from_secs(10) }),
            "silent since the last good sample, at 0 s"
        );
        assert!(w.observe(39_999, &one(5, 0), BOUND).is_some(), "nothing asked for 29.999 s");
        assert_eq!(w.observe(40_000, &one(5, 0), BOUND), None, "nothing asked for {FORGOTTEN:?}");
    }

    proptest! {
        /// Whatever the history, the watch reports a silence exactly when some broker had
        /// requests waiting with nothing received since, for at least the bound, and the client
        /// did not stop asking for [`FORGOTTEN`] in between.
        #[test]
        fn silence_is_a_waiting_broker_unanswered_for_the_bound(
            steps in proptest::collection::vec((1u64..6_000, any::<bool>(), any::<bool>()), 1..120)
        ) {
            let mut w = LinkWatch::default();
            let (mut now, mut rx) = (0u64, 0u64);
            let (mut last, mut silent_since, mut idle_since): (u64, Option<u64>, Option<u64>) = (0, None, None);
            let mut first = true;
            for (dt, answers, waiting) in steps {
                now += dt;
                // The first sample has nothing to compare with: it never counts as an answer.
                let answered = answers && !first;
                if answers { rx += 1; }
                let verdict = w.observe(now, &one(rx, i64::from(waiting)), BOUND);
                if answered {
                    (silent_since, idle_since) = (None, None);
                } else if waiting {
                    silent_since = silent_since.or(Some(if first { now } else { last }));
                    idle_since = None;
                } else if silent_since.is_some() {
                    let idle = *idle_since.get_or_insert(now);
                    if now - idle >= 30_000 { (silent_since, idle_since) = (None, None); }
                }
                first = false;
                last = now;
                let expected = silent_since.filter(|since| now - since >= 10_000);
                prop_assert_eq!(verdict.is_some(), expected.is_some(), "at {} ms, silent since {:?}", now, silent_since);
                if let (Some(s), Some(since)) = (verdict, expected) {
                    prop_assert_eq!(s.longest, Duration::from_millis(now - since));
                }
            }
        }
    }
}
