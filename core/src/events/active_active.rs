//! Events of active-active flows: records kept from looping, and conflicts resolved.

use metrics::counter;
use tracing::debug;

/// Records a flow did not deliver because the target is already in their provenance: they
/// came from there, and delivering them would make them circulate.
pub struct LoopsPrevented<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// How many records of one batch.
    pub records: usize,
}

impl LoopsPrevented<'_> {
    /// Logs and counts the event.
    pub fn emit(&self) {
        debug!(flow = self.flow, records = self.records, "not delivered: the target is already in their provenance");
        counter!("strait_records_dropped_total", "flow" => self.flow.to_string(), "reason" => "provenance")
            .increment(self.records as u64);
    }
}

/// Records the conflict-resolution component refused: older than what the target holds, or
/// written outside their key's home region.
pub struct ConflictsRefused<'a> {
    /// `source->target`.
    pub flow: &'a str,
    /// Refused and dropped, in one batch.
    pub dropped: usize,
    /// Refused and routed to the dead-letter topic, in one batch.
    pub dead_lettered: usize,
}

impl ConflictsRefused<'_> {
    /// Logs and counts the event.
    pub fn emit(&self) {
        debug!(
            flow = self.flow,
            dropped = self.dropped,
            dead_lettered = self.dead_lettered,
            "conflict resolution refused records"
        );
        let flow = self.flow.to_string();
        counter!("strait_conflicts_refused_total", "flow" => flow.clone(), "outcome" => "dropped")
            .increment(self.dropped as u64);
        counter!("strait_records_dropped_total", "flow" => flow.clone(), "reason" => "conflict")
            .increment(self.dropped as u64);
        counter!("strait_conflicts_refused_total", "flow" => flow, "outcome" => "dead-lettered")
            .increment(self.dead_lettered as u64);
    }
}
