//! The produce stage's side of the delivery strategy ([`crate::delivery`]): its producers, its
//! ledger, the fenced position writer and its events, each behind the strategy's trait.

use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::producer::BaseRecord;
use rdkafka::types::RDKafkaErrorCode;

use super::delivery::Deliveries;
use super::in_flight::POSITION_TICKET;
use super::lanes::Lanes;
use super::positions::PositionWriter;
use super::{OffsetSyncSink, ProduceStage};
use crate::delivery::{Abort, Book, Counts, Io, Lane, Outcome, PositionRecord, Report, Write, Writer};
use crate::events::{FlowRetrying, OffsetSyncsSent, PositionsStored, TransactionsAborted, TransactionsCommitted};
use crate::offsets::mm2::OffsetSync;
use crate::offsets::store::{encode_key, encode_run_key, encode_run_value, encode_value, Stored};
use crate::offsets::PositionWrite;
use crate::pipeline::Slots;
use crate::record::SlotId;

/// Lends `f` the strategy's view of `stage`.
pub(super) fn with<T>(stage: &mut ProduceStage, known_slots: &mut usize, f: impl FnOnce(&mut Io<'_>) -> T) -> T {
    let mut lane = LaneIo {
        lanes: &mut stage.lanes,
        topic: &stage.positions_topic,
        deliveries: &stage.deliveries,
        slots: &stage.slots,
    };
    let mut book = BookIo { deliveries: &stage.deliveries, slots: &stage.slots, known_slots };
    let mut report = ReportIo {
        flow: &stage.flow,
        offset_syncs: stage.offset_syncs.as_ref(),
        deliveries: &stage.deliveries,
        slots: &stage.slots,
    };
    let writer = stage.position_writer.as_mut().map(|w| w as &mut dyn Writer);
    f(&mut Io { lane: &mut lane, book: &mut book, writer, report: &mut report })
}

struct LaneIo<'a> {
    lanes: &'a mut Lanes,
    topic: &'a str,
    deliveries: &'a Deliveries,
    slots: &'a Slots,
}

impl Lane for LaneIo<'_> {
    fn lane_of(&self, partition: i32) -> Option<usize> {
        self.lanes.lane_of(partition)
    }

    fn write(&mut self, lane: usize, record: &PositionRecord) -> Write {
        let mut out = BaseRecord::with_opaque_to(self.topic, POSITION_TICKET).key(&record.key[..]);
        if let Some(v) = &record.value {
            out = out.payload(&v[..]);
        }
        match self.lanes.producer(lane).send(out) {
            Ok(()) => Write::Taken,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => Write::Full,
            Err((e, _)) => Write::Failed(e.to_string()),
        }
    }

    fn poll(&mut self, wait: Duration) {
        self.lanes.poll(wait);
        self.deliveries.state().round_clock_ms = None;
        count_acks(self.deliveries, self.slots);
    }

    fn in_flight(&self) -> usize {
        usize::try_from(self.lanes.in_flight()).unwrap_or(0)
    }

    fn begin(&mut self) -> Result<(), String> {
        self.lanes.begin().map_err(describe)
    }

    fn commit(&mut self, wait: Duration) -> Result<bool, String> {
        self.lanes.commit(wait).map_err(describe)
    }

    fn abort(&mut self, wait: Duration) -> Abort {
        self.lanes.abort(wait)
    }
}

/// A transactional call's error, with what to do when it is one the operator can fix.
fn describe(e: KafkaError) -> String {
    let hint = match &e {
        KafkaError::Transaction(t) if t.code() == RDKafkaErrorCode::TransactionalIdAuthorizationFailed => {
            " (grant strait WRITE and DESCRIBE on the transactional id prefix `strait.` on the target)"
        }
        _ => "",
    };
    format!("{e}{hint}")
}

struct BookIo<'a> {
    deliveries: &'a Deliveries,
    slots: &'a Slots,
    /// Slots whose stored state the ledger has been told about.
    known_slots: &'a mut usize,
}

impl BookIo<'_> {
    /// Tells the ledger about slots discovery added or retired since the last call.
    fn sync_slots(&mut self) {
        let slots = self.slots.read();
        let mut state = self.deliveries.state();
        for (id, slot) in slots.iter().enumerate().skip(*self.known_slots) {
            state.ledger.resume(id as SlotId, slot.resume_run);
            if let Some(start) = slot.start_at {
                state.ledger.start_at(id as SlotId, start);
            }
        }
        *self.known_slots = slots.len();
        for (id, slot) in slots.iter().enumerate() {
            if slot.retired {
                state.ledger.retire(id as SlotId);
            }
        }
    }
}

impl Book for BookIo<'_> {
    fn take(&mut self) -> Vec<PositionRecord> {
        self.sync_slots();
        let writes = self.deliveries.state().ledger.take_writes();
        if writes.is_empty() {
            return Vec::new();
        }
        let slots = self.slots.read();
        writes
            .into_iter()
            .filter_map(|write| match write {
                PositionWrite::ClosedRun { slot, run } => slots.get(slot as usize).map(|s| {
                    let key = encode_run_key(&s.source_topic, s.partition, run.upstream);
                    let value = encode_run_value(run);
                    let counts = Counts { partitions: 0, runs: 1, mapping_bytes: key.len() + value.len() };
                    PositionRecord { partition: s.partition, key, value: Some(value), counts }
                }),
                PositionWrite::Position { slot, next, open } => slots.get(slot as usize).map(|s| {
                    // The open run adds three INT64s to a record written anyway.
                    let counts = Counts { partitions: 1, runs: 0, mapping_bytes: if open.is_some() { 24 } else { 0 } };
                    PositionRecord {
                        partition: s.partition,
                        key: encode_key(&s.source_topic, s.partition),
                        value: Some(encode_value(Stored { next, open })),
                        counts,
                    }
                }),
                PositionWrite::Forget { slot } => slots.get(slot as usize).map(|s| PositionRecord {
                    partition: s.partition,
                    key: encode_key(&s.source_topic, s.partition),
                    value: None,
                    counts: Counts::default(),
                }),
            })
            .collect()
    }

    fn lost(&mut self) {
        self.deliveries.state().ledger.write_failed();
    }

    fn refused(&self) -> bool {
        self.deliveries.state().ledger.refusal().is_some()
    }
}

impl Writer for PositionWriter {
    fn hand_over(&mut self, batch: Vec<PositionRecord>) -> bool {
        PositionWriter::hand_over(self, batch.into_iter().map(|r| (r.key, r.value)).collect())
    }

    fn outcome(&mut self, wait: Duration) -> Outcome {
        PositionWriter::outcome(self, wait)
    }

    fn busy(&self) -> bool {
        PositionWriter::busy(self)
    }
}

struct ReportIo<'a> {
    flow: &'a str,
    offset_syncs: Option<&'a OffsetSyncSink>,
    deliveries: &'a Deliveries,
    slots: &'a Slots,
}

impl Report for ReportIo<'_> {
    fn stored(&mut self, counts: Counts) {
        PositionsStored {
            flow: self.flow,
            partitions: counts.partitions,
            runs: counts.runs,
            mapping_bytes: counts.mapping_bytes,
        }
        .emit();
    }

    fn committed(&mut self, took: Duration) {
        TransactionsCommitted { flow: self.flow, took }.emit();
    }

    fn aborted(&mut self, why: &str, failure: Option<&str>) {
        TransactionsAborted { flow: self.flow, why, failure }.emit();
    }

    fn retrying(&mut self, what: &str) {
        FlowRetrying { flow: self.flow, what }.emit();
    }

    fn readable(&mut self) {
        emit_offset_syncs(self.flow, self.offset_syncs, self.deliveries, self.slots);
    }
}

/// Hands the acknowledgements counted since the last call to the partition metrics.
pub(super) fn count_acks(deliveries: &Deliveries, slots: &Slots) {
    let rounds = deliveries.state().acks.take();
    if rounds.is_empty() {
        return;
    }
    let slots = slots.read();
    for (slot, round) in rounds {
        if let Some(s) = slots.get(slot as usize) {
            s.metrics.acked(&round);
        }
    }
}

/// Writes the offset syncs that came due since the last call (MM2's layout; the source
/// topic-partition is the key).
fn emit_offset_syncs(flow: &str, sink: Option<&OffsetSyncSink>, deliveries: &Deliveries, slots: &Slots) {
    let Some(sink) = sink else { return };
    let due: Vec<(SlotId, OffsetSync)> = deliveries.state().ledger.take_syncs();
    if due.is_empty() {
        return;
    }
    let slots = slots.read();
    let (mut sent, mut bytes) = (0, 0);
    for (slot, sync) in due {
        let Some(s) = slots.get(slot as usize) else { continue };
        let key = OffsetSync::encode_key(&s.source_topic, s.partition);
        let value = sync.encode_value();
        sent += 1;
        bytes += key.len() + value.len();
        // A lost sync only makes translation coarser; it never loses data, so a full queue
        // drops it rather than stalling replication.
        if let Err((e, _)) = sink.producer.send(BaseRecord::to(&sink.topic).key(&key[..]).payload(&value[..])) {
            FlowRetrying { flow, what: &format!("offset sync to {} not sent: {e}", sink.topic) }.emit();
        }
    }
    OffsetSyncsSent { flow, syncs: sent, bytes }.emit();
}
