//! The unit that moves between stages: a batch of records, never a single one.
//!
//! A batch owns one buffer with every key, value and header of its records, back to back; a
//! record names its parts as [`Span`]s of it. Fetching a record is then one copy into a buffer
//! that grows once per batch, not two allocations per record, and the WASM record hook takes
//! the buffer as it is: headers are kept in the packed layout of the WIT's `types.batch`.

use std::ops::Range;

use super::headers::{pack_header, Headers};
use super::offset::SourceOffset;

/// Index of a source topic-partition within a flow: records carry it instead of topic names,
/// and the flow's slot table says what it stands for.
pub type SlotId = u32;

/// Where a part of a record lies in its batch's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    /// First byte.
    pub start: u32,
    /// Length in bytes.
    pub len: u32,
}

impl Span {
    fn range(self) -> Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
    }
}

/// A record hook's rewrite of one record: each field that is `Some` replaces the record's own.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecordEdit {
    /// Which record of the batch.
    pub position: u32,
    /// New key; `Some(None)` makes it null.
    pub key: Option<Option<Vec<u8>>>,
    /// New value; `Some(None)` makes it a tombstone.
    pub value: Option<Option<Vec<u8>>>,
    /// New headers, packed as a batch keeps them.
    pub headers: Option<Vec<u8>>,
    /// New timestamp in milliseconds.
    pub timestamp: Option<i64>,
    /// A target topic instead of the remote topic the naming policy chose.
    pub topic: Option<String>,
}

/// One source record on its way to the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The source topic-partition; the target partition has the same number.
    pub slot: SlotId,
    /// Offset in the source partition.
    pub offset: SourceOffset,
    /// Timestamp in milliseconds, copied to the target unchanged.
    pub timestamp: i64,
    /// Key; `None` is a null key.
    pub key: Option<Span>,
    /// Value; `None` is a tombstone.
    pub value: Option<Span>,
    /// Headers in their original order, packed (see [`pack_header`]).
    pub headers: Span,
    /// A target topic the policy routed this record to, instead of the slot's remote topic.
    pub route: Option<std::sync::Arc<str>>,
}

/// Records fetched together, plus the last fetched offset of every partition they came from,
/// so that records a stage drops still move the partition's position forward.
#[derive(Debug, Default)]
pub struct Batch {
    /// Records in fetch order (source order within each partition).
    pub records: Vec<Record>,
    /// `(slot, last offset fetched)` for each partition in this batch.
    pub fetched_through: Vec<(SlotId, SourceOffset)>,
    /// Rewrites the filter stage's record hook asked for, which the transform stage applies;
    /// positions index `records` as they are now (see [`Self::retain`]).
    pub edits: Vec<RecordEdit>,
    /// Every key, value and header of `records`; bytes an edit replaced stay until the batch goes.
    data: Vec<u8>,
}

impl Batch {
    /// Most bytes one batch's buffer holds: spans are 32-bit, and a stage never fills a batch
    /// past its byte bound plus one record (Kafka's records are under 2 GiB).
    pub const MAX_BYTES: usize = 1 << 30;

    /// An empty batch with room for `records` records and `bytes` bytes of their data.
    pub fn with_capacity(records: usize, bytes: usize) -> Self {
        Self {
            records: Vec::with_capacity(records),
            fetched_through: Vec::new(),
            edits: Vec::new(),
            data: Vec::with_capacity(bytes),
        }
    }

    /// Keeps the records whose flag in `keep` is true (a missing flag keeps), and the edits of
    /// the kept ones, renumbered to their new positions. Dropped records still count as done
    /// for their partition's position: `fetched_through` stays.
    pub fn retain(&mut self, keep: &[bool]) {
        let kept = |i: usize| keep.get(i).copied().unwrap_or(true);
        if !self.edits.is_empty() {
            // New position of each record: how many were kept before it.
            let mut position = Vec::with_capacity(self.records.len());
            let mut next = 0u32;
            for i in 0..self.records.len() {
                position.push(next);
                next += u32::from(kept(i));
            }
            self.edits.retain_mut(|e| {
                let i = e.position as usize;
                let stays = i < position.len() && kept(i);
                if stays {
                    e.position = position[i];
                }
                stays
            });
        }
        let mut i = 0;
        self.records.retain(|_| {
            i += 1;
            kept(i - 1)
        });
    }

    /// Appends a record made of `key`, `value` and `headers` and notes how far its partition
    /// was fetched.
    pub fn push<'h>(
        &mut self,
        slot: SlotId,
        offset: SourceOffset,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: impl IntoIterator<Item = (&'h [u8], Option<&'h [u8]>)>,
    ) {
        let key = key.map(|k| self.put(k));
        let value = value.map(|v| self.put(v));
        let start = self.data.len();
        for (k, v) in headers {
            pack_header(&mut self.data, k, v);
        }
        let headers = self.span_from(start);
        match self.fetched_through.iter_mut().find(|(s, _)| *s == slot) {
            Some(entry) => entry.1 = entry.1.max(offset),
            None => self.fetched_through.push((slot, offset)),
        }
        self.records.push(Record { slot, offset, timestamp, key, value, headers, route: None });
    }

    /// Appends `bytes` to the buffer; the span names them.
    pub fn put(&mut self, bytes: &[u8]) -> Span {
        let start = self.data.len();
        self.data.extend_from_slice(bytes);
        self.span_from(start)
    }

    fn span_from(&self, start: usize) -> Span {
        // Fill stops at `MAX_BYTES`, far below 4 GiB.
        Span { start: start as u32, len: (self.data.len() - start) as u32 }
    }

    /// The bytes `span` names; empty if it lies outside the buffer.
    pub fn bytes(&self, span: Span) -> &[u8] {
        self.data.get(span.range()).unwrap_or_default()
    }

    /// The bytes `span` names, to change in place; empty if it lies outside the buffer.
    pub fn bytes_mut(&mut self, span: Span) -> &mut [u8] {
        self.data.get_mut(span.range()).unwrap_or_default()
    }

    /// Rewrites the record at `edit.position` as `edit` says: new key, value, headers,
    /// timestamp, and route to `edit.topic`; a position outside the batch changes nothing.
    /// Whether the edit may be made (its headers well formed, its route allowed) is the
    /// caller's to check. New bytes go to the end of the buffer; the replaced ones stay unused.
    pub fn apply(&mut self, edit: RecordEdit) {
        let i = edit.position as usize;
        if i >= self.records.len() {
            return;
        }
        let key = edit.key.map(|k| k.map(|k| self.put(&k)));
        let value = edit.value.map(|v| v.map(|v| self.put(&v)));
        let headers = edit.headers.map(|h| self.put(&h));
        let record = &mut self.records[i];
        if let Some(key) = key {
            record.key = key;
        }
        if let Some(value) = value {
            record.value = value;
        }
        if let Some(headers) = headers {
            record.headers = headers;
        }
        if let Some(ts) = edit.timestamp {
            record.timestamp = ts;
        }
        if let Some(topic) = edit.topic {
            record.route = Some(std::sync::Arc::from(topic));
        }
    }

    /// The key of `record`.
    pub fn key(&self, record: &Record) -> Option<&[u8]> {
        record.key.map(|s| self.bytes(s))
    }

    /// The value of `record`.
    pub fn value(&self, record: &Record) -> Option<&[u8]> {
        record.value.map(|s| self.bytes(s))
    }

    /// The headers of `record`, in order.
    pub fn headers(&self, record: &Record) -> Headers<'_> {
        Headers::new(self.bytes(record.headers))
    }

    /// Bytes of `record`'s key, value and headers, MM2's `byte-count` measure.
    pub fn size(&self, record: &Record) -> usize {
        let header_bytes: usize = if record.headers.len == 0 {
            0
        } else {
            self.headers(record).map(|(k, v)| k.len() + v.map_or(0, <[u8]>::len)).sum()
        };
        record.key.map_or(0, |s| s.len as usize) + record.value.map_or(0, |s| s.len as usize) + header_bytes
    }

    /// The whole buffer, for a hook that takes the batch packed.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Lends the buffer out (to a hook that takes it by value) and back with [`Self::restore_data`].
    pub fn take_data(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.data)
    }

    /// Takes back a buffer lent with [`Self::take_data`].
    pub fn restore_data(&mut self, data: Vec<u8>) {
        self.data = data;
    }

    /// Bytes in the buffer.
    pub fn data_len(&self) -> usize {
        self.data.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retain_drops_the_edits_of_dropped_records_and_renumbers_the_rest() {
        let mut b = Batch::with_capacity(4, 64);
        for offset in 0..4 {
            b.push(0, SourceOffset(offset), 0, None, Some(b"v"), []);
        }
        let edit = |position: u32, ts: i64| RecordEdit { position, timestamp: Some(ts), ..RecordEdit::default() };
        b.edits = vec![edit(0, 100), edit(1, 101), edit(3, 103)];
        b.retain(&[false, true, false, true]);
        assert_eq!(b.records.iter().map(|r| r.offset.get()).collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(b.edits, vec![edit(0, 101), edit(1, 103)], "edits follow their records");
        assert_eq!(b.fetched_through, vec![(0, SourceOffset(3))], "dropped records still count as fetched");
    }

    #[test]
    fn records_read_back_what_was_pushed_from_one_buffer() {
        let mut b = Batch::with_capacity(2, 64);
        b.push(
            3,
            SourceOffset(10),
            1_000,
            Some(b"k"),
            Some(b"value"),
            [(&b"trace"[..], Some(&b"1"[..])), (&b"null"[..], None)],
        );
        b.push(3, SourceOffset(11), 1_001, None, None, []);
        let (first, second) = (&b.records[0], &b.records[1]);
        assert_eq!((b.key(first), b.value(first)), (Some(&b"k"[..]), Some(&b"value"[..])));
        assert_eq!(b.headers(first).collect::<Vec<_>>(), vec![(&b"trace"[..], Some(&b"1"[..])), (&b"null"[..], None)]);
        assert_eq!(b.size(first), 1 + 5 + 5 + 1 + 4);
        assert_eq!((b.key(second), b.value(second), b.headers(second).count(), b.size(second)), (None, None, 0, 0));
        assert_eq!(b.fetched_through, vec![(3, SourceOffset(11))]);
        let empty = b.put(b"");
        assert_eq!(b.bytes(empty), b"", "an empty key is not a null one");
    }

    #[test]
    fn apply_rewrites_only_what_the_edit_names_and_ignores_a_position_outside() {
        let mut b = Batch::with_capacity(2, 64);
        b.push(0, SourceOffset(0), 1, Some(b"k0"), Some(b"v0"), [(&b"h"[..], Some(&b"1"[..]))]);
        b.push(0, SourceOffset(1), 2, Some(b"k1"), Some(b"v1"), []);
        b.apply(RecordEdit {
            position: 1,
            key: Some(None),
            value: Some(Some(b"new".to_vec())),
            ..RecordEdit::default()
        });
        b.apply(RecordEdit {
            position: 0,
            timestamp: Some(9),
            topic: Some("elsewhere".into()),
            ..RecordEdit::default()
        });
        b.apply(RecordEdit { position: 2, value: Some(None), ..RecordEdit::default() });
        let (first, second) = (&b.records[0], &b.records[1]);
        assert_eq!((b.key(first), b.value(first), first.timestamp), (Some(&b"k0"[..]), Some(&b"v0"[..]), 9));
        assert_eq!(first.route.as_deref(), Some("elsewhere"));
        assert_eq!(b.headers(first).count(), 1, "headers the edit leaves alone stay");
        assert_eq!((b.key(second), b.value(second), second.timestamp), (None, Some(&b"new"[..]), 2));
        assert_eq!(second.route, None);
        assert_eq!(b.records.len(), 2, "an edit past the end adds nothing");
    }
}
