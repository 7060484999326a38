//! Reading (and, for tests, writing) the packed batch layout of `strait:policy/types.batch`.

/// Entries per record in `index`.
pub const STRIDE: usize = 8;
/// Length that marks a null key, value or header value.
pub const NULL: u32 = u32::MAX;

/// A read-only view of a packed batch.
pub struct View<'a> {
    index: &'a [u32],
    data: &'a [u8],
}

impl<'a> View<'a> {
    /// Wraps the `index` and `data` of a batch.
    pub fn new(index: &'a [u32], data: &'a [u8]) -> Self {
        Self { index, data }
    }

    /// Records in the batch.
    pub fn len(&self) -> usize {
        self.index.len() / STRIDE
    }

    /// Whether the batch has no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn slice(&self, offset: u32, len: u32) -> Option<&'a [u8]> {
        (len != NULL).then(|| self.data.get(offset as usize..(offset as usize + len as usize))).flatten()
    }

    /// Key of record `i`; `None` when null.
    pub fn key(&self, i: usize) -> Option<&'a [u8]> {
        self.slice(self.index[i * STRIDE + 1], self.index[i * STRIDE + 2])
    }

    /// Value of record `i`; `None` for a tombstone.
    pub fn value(&self, i: usize) -> Option<&'a [u8]> {
        self.slice(self.index[i * STRIDE + 3], self.index[i * STRIDE + 4])
    }

    /// Headers of record `i` in order.
    pub fn headers(&self, i: usize) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a {
        let mut rest = self.slice(self.index[i * STRIDE + 5], self.index[i * STRIDE + 6]).unwrap_or_default();
        std::iter::from_fn(move || {
            let (klen, r) = read_u32(rest)?;
            let (key, r) = r.split_at_checked(klen as usize)?;
            let (vlen, r) = read_u32(r)?;
            let (value, r) = if vlen == NULL {
                (None, r)
            } else {
                let (v, r) = r.split_at_checked(vlen as usize)?;
                (Some(v), r)
            };
            rest = r;
            Some((key, value))
        })
    }
}

fn read_u32(b: &[u8]) -> Option<(u32, &[u8])> {
    let (head, rest) = b.split_first_chunk::<4>()?;
    Some((u32::from_le_bytes(*head), rest))
}

/// Builds a packed batch (the host's job; here for tests).
#[derive(Default)]
pub struct Builder {
    /// Eight `u32` per record.
    pub index: Vec<u32>,
    /// The bytes.
    pub data: Vec<u8>,
}

impl Builder {
    fn put(&mut self, bytes: Option<&[u8]>) -> (u32, u32) {
        let offset = self.data.len() as u32;
        match bytes {
            Some(b) => {
                self.data.extend_from_slice(b);
                (offset, b.len() as u32)
            }
            None => (offset, NULL),
        }
    }

    /// Appends a record on topic 0.
    pub fn push(&mut self, key: Option<&[u8]>, value: Option<&[u8]>, headers: &[(&[u8], Option<&[u8]>)]) {
        let (ko, kl) = self.put(key);
        let (vo, vl) = self.put(value);
        let mut h = Vec::new();
        for (k, v) in headers {
            h.extend_from_slice(&(k.len() as u32).to_le_bytes());
            h.extend_from_slice(k);
            match v {
                Some(v) => {
                    h.extend_from_slice(&(v.len() as u32).to_le_bytes());
                    h.extend_from_slice(v);
                }
                None => h.extend_from_slice(&NULL.to_le_bytes()),
            }
        }
        let (ho, hl) = self.put(Some(&h));
        self.index.extend_from_slice(&[0, ko, kl, vo, vl, ho, hl, 0]);
    }
}
