//! Serving a producer's delivery reports without spinning.
//!
//! rdkafka 0.39's `BaseProducer::poll(t)` hands librdkafka the time left to `t` cut down to a
//! whole millisecond, and when that wait ends without a report it asks again, without waiting,
//! until `t` has passed: every poll that timed out spun through the last fraction of a
//! millisecond. rdkafka's `ThreadedProducer` polls every 100 ms, so each of strait's control
//! producers spent 0.8% of a core spinning while idle (perf: `clock_gettime` under
//! `BaseProducer::poll`; strace: 0.8 ms between a timed-out wait and the next). Its `flush` polls
//! 100 ms at a time, so a flush that found one record in flight took 100 ms however soon the
//! broker answered.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::config::{ClientConfig, FromClientConfigAndContext};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::producer::{BaseProducer, DefaultProducerContext, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;

/// Added to a poll's wait: librdkafka is handed the whole milliseconds asked for, and its wait
/// never ends before them (it checks the monotonic clock and waits again on an early wake-up).
/// A thread's wake-up comes a little late (Linux's default timer slack is 50 µs), later than
/// this, so the deadline has passed when the wait ends and rdkafka asks no more. A thread
/// pre-empted between rdkafka's reading the clock and librdkafka's may still spin, once.
const PAST_WHOLE_MILLISECONDS: Duration = Duration::from_micros(20);

/// How long a flush serves reports between looks at whether every record was answered.
const FLUSH_STEP: Duration = Duration::from_millis(2);

/// How long each poll of the control producers' thread lasts, between looks at its stop flag.
const CONTROL_POLL: Duration = Duration::from_millis(100);

/// Serves `producer`'s delivery reports for `timeout` (rdkafka's `poll` runs to its deadline
/// even after a report). A wait that a report interrupts still ends in rdkafka's spin; one
/// that times out does not.
pub fn poll_producer<C: ProducerContext>(producer: &BaseProducer<C>, timeout: Duration) {
    producer.poll(if timeout.is_zero() { timeout } else { timeout + PAST_WHOLE_MILLISECONDS });
}

/// Waits until the target answered every record handed to `producer`, at most `timeout`; an
/// error when it did not (`KafkaError::Flush`).
pub fn flush_producer<C: ProducerContext>(producer: &BaseProducer<C>, timeout: Duration) -> KafkaResult<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match producer.flush(Duration::ZERO) {
            Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut)) if Instant::now() < deadline => {
                poll_producer(producer, FLUSH_STEP.min(deadline.saturating_duration_since(Instant::now())));
            }
            done => return done,
        }
    }
}

/// A producer whose delivery reports a thread of its own serves (what rdkafka's
/// `ThreadedProducer` does, through [`poll_producer`]). Strait's own records (heartbeats,
/// checkpoints, offset syncs) go through it, and nothing waits on their reports.
pub struct PolledProducer {
    producer: Arc<BaseProducer<DefaultProducerContext>>,
    stop: Arc<AtomicBool>,
    poller: Option<JoinHandle<()>>,
}

impl FromClientConfigAndContext<DefaultProducerContext> for PolledProducer {
    fn from_config_and_context(config: &ClientConfig, context: DefaultProducerContext) -> KafkaResult<Self> {
        let producer = Arc::new(BaseProducer::from_config_and_context(config, context)?);
        let stop = Arc::new(AtomicBool::new(false));
        let poller = {
            let (producer, stop) = (producer.clone(), stop.clone());
            std::thread::Builder::new().name("control poll".into()).spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    poll_producer(&producer, CONTROL_POLL);
                }
            })
        };
        // Without its thread the producer would still send, but its reports would pile up.
        let poller = poller.map_err(|e| {
            rdkafka::error::KafkaError::ClientCreation(format!("could not start its polling thread: {e}"))
        })?;
        Ok(Self { producer, stop, poller: Some(poller) })
    }
}

impl PolledProducer {
    /// [`flush_producer`]: waits until every record was answered, at most `timeout`, looking
    /// every 2 ms instead of rdkafka's 100.
    pub fn flush(&self, timeout: Duration) -> KafkaResult<()> {
        flush_producer(&self.producer, timeout)
    }
}

impl Deref for PolledProducer {
    type Target = BaseProducer<DefaultProducerContext>;

    fn deref(&self) -> &Self::Target {
        &self.producer
    }
}

impl Drop for PolledProducer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(poller) = self.poller.take() {
            let _ = poller.join();
        }
    }
}
