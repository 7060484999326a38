//! Kafka protocol primitives (big-endian INT16/INT32/INT64 and INT16-length STRING), the
//! encoding MM2 uses for its internal topics and strait for its position records.

/// Appends a Kafka protocol STRING.
pub fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as i16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Appends a Kafka protocol INT16.
pub fn put_i16(out: &mut Vec<u8>, v: i16) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends a Kafka protocol INT32.
pub fn put_i32(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends a Kafka protocol INT64.
pub fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Reads protocol primitives from a byte slice; every getter returns `None` past the end.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Starts reading at the beginning of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.buf.split_first_chunk::<N>()?;
        self.buf = rest;
        Some(*head)
    }

    /// Reads an INT16.
    pub fn i16(&mut self) -> Option<i16> {
        self.take().map(i16::from_be_bytes)
    }
    /// Reads an INT32.
    pub fn i32(&mut self) -> Option<i32> {
        self.take().map(i32::from_be_bytes)
    }
    /// Reads an INT64.
    pub fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_be_bytes)
    }
    /// Reads a STRING.
    pub fn string(&mut self) -> Option<String> {
        let len = usize::try_from(self.i16()?).ok()?;
        let bytes = self.buf.get(..len)?;
        self.buf = &self.buf[len..];
        String::from_utf8(bytes.to_vec()).ok()
    }
}

/// The key of a record about one topic-partition: topic STRING, partition INT32. Position
/// records and MM2's offset syncs share it.
pub fn topic_partition_key(topic: &str, partition: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(topic.len() + 6);
    put_string(&mut out, topic);
    put_i32(&mut out, partition);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut b = Vec::new();
        put_string(&mut b, "orders");
        put_i32(&mut b, 2);
        put_i16(&mut b, 0);
        put_i64(&mut b, 1 << 40);
        assert_eq!(&b[..8], &[0, 6, b'o', b'r', b'd', b'e', b'r', b's']);
        let mut r = Reader::new(&b);
        assert_eq!(r.string().as_deref(), Some("orders"));
        assert_eq!((r.i32(), r.i16(), r.i64()), (Some(2), Some(0), Some(1 << 40)));
        assert_eq!(r.i16(), None);
    }
}
