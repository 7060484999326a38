//! Delivery reports: what the target said about each record and position write, gathered for
//! the produce stage in one ledger however many producers the flow has.

use std::sync::{Arc, Mutex, MutexGuard};

use rdkafka::message::Message;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;

use crate::clock::now_millis;
use crate::cluster::Link;
use crate::events::AckRounds;
use crate::offsets::{Ledger, TargetOffset};

use super::in_flight::{InFlight, Ticket, POSITION_TICKET};

#[derive(Default)]
pub(super) struct DeliveryState {
    pub(super) ledger: Ledger,
    /// The records handed to producers and not yet reported on.
    pub(super) in_flight: InFlight,
    /// The client's error code of the first refused record, for the hint in its error.
    pub(super) refused_code: Option<RDKafkaErrorCode>,
    /// Acknowledgements not yet counted in the metrics.
    pub(super) acks: AckRounds,
    /// The wall clock at the first acknowledgement of the current poll: a poll serves its
    /// reports in one burst, so one clock read serves them all (reading it per record was 1%
    /// of the process at 250,000 records/s).
    pub(super) round_clock_ms: Option<i64>,
}

/// The delivery state of one flow, shared by its producers (one per task in exactly-once mode).
pub struct Deliveries {
    state: Mutex<DeliveryState>,
}

impl Deliveries {
    /// The state of one flow; `offset_lag_max` turns on MM2's offset-sync rule.
    pub fn new(offset_lag_max: Option<i64>) -> Arc<Self> {
        let state = DeliveryState { ledger: Ledger::new(offset_lag_max), ..DeliveryState::default() };
        Arc::new(Self { state: Mutex::new(state) })
    }

    pub(super) fn state(&self) -> MutexGuard<'_, DeliveryState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A producer's context: hands its delivery reports, on the produce thread, to the flow's
/// [`Deliveries`].
pub struct DeliveryContext {
    deliveries: Arc<Deliveries>,
    /// Whether the target still answers, from the producer's statistics.
    link: Link,
}

impl DeliveryContext {
    /// A context that reports to `deliveries` and watches the target through `link`.
    pub fn new(deliveries: Arc<Deliveries>, link: Link) -> Self {
        Self { deliveries, link }
    }
}

impl ClientContext for DeliveryContext {
    fn stats_raw(&self, statistics: &[u8]) {
        self.link.observe(statistics);
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Ticket;

    fn delivery(&self, result: &DeliveryResult<'_>, ticket: Ticket) {
        let mut state = self.deliveries.state();
        if ticket == POSITION_TICKET {
            if result.is_err() {
                state.ledger.write_failed();
            }
            return;
        }
        // A ticket is settled once; librdkafka reports each record once.
        let Some(sent) = state.in_flight.settle(ticket) else { return };
        match result {
            Ok(message) => {
                // A re-routed record is no mirror of its source offset: to the mapping it is a gap.
                let landed = (!sent.routed).then(|| TargetOffset(message.offset()));
                state.ledger.acked(sent.slot, sent.offset, landed);
                let now = *state.round_clock_ms.get_or_insert_with(now_millis);
                state.acks.add(sent.slot, sent.bytes, now - sent.timestamp);
            }
            Err((e, _)) => {
                let first = state.ledger.refusal().is_none();
                state.ledger.refused(sent.slot, sent.offset, e.to_string());
                if first && state.ledger.refusal().is_some() {
                    state.refused_code = e.rdkafka_error_code();
                }
            }
        }
    }
}
