//! Headers packed back to back in a batch's buffer, in the layout of the WIT's `types.batch`,
//! so the record hook takes them without a copy.

/// Length that marks a null header value in the packed layout.
pub(crate) const NULL: u32 = u32::MAX;

/// Appends one header to `out` in the packed layout of the WIT's `types.batch`: the key's
/// length (u32, little-endian) and bytes, then the value's length and bytes, or [`NULL`].
pub fn pack_header(out: &mut Vec<u8>, key: &[u8], value: Option<&[u8]>) {
    pack_header_parts(out, key, value.as_ref().map(std::slice::from_ref));
}

/// [`pack_header`] for a value given in parts, written one after another: a header that grows
/// (such as the provenance path) is packed without first joining its value in a buffer.
pub fn pack_header_parts(out: &mut Vec<u8>, key: &[u8], value: Option<&[&[u8]]>) {
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    match value {
        Some(parts) => {
            let len: usize = parts.iter().map(|p| p.len()).sum();
            out.extend_from_slice(&(len as u32).to_le_bytes());
            parts.iter().for_each(|p| out.extend_from_slice(p));
        }
        None => out.extend_from_slice(&NULL.to_le_bytes()),
    }
}

/// The headers of packed bytes, in order, as `(key, value)`; a malformed tail ends them (see
/// [`check_headers`] for bytes from outside).
#[derive(Debug, Clone)]
pub struct Headers<'a> {
    rest: &'a [u8],
}

impl<'a> Headers<'a> {
    /// The headers packed in `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    fn take_u32(&mut self) -> Option<u32> {
        let (head, rest) = self.rest.split_first_chunk::<4>()?;
        self.rest = rest;
        Some(u32::from_le_bytes(*head))
    }

    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let (taken, rest) = self.rest.split_at_checked(len)?;
        self.rest = rest;
        Some(taken)
    }

    fn next_header(&mut self) -> Option<(&'a [u8], Option<&'a [u8]>)> {
        let key_len = self.take_u32()? as usize;
        let key = self.take(key_len)?;
        let value = match self.take_u32()? {
            NULL => None,
            len => Some(self.take(len as usize)?),
        };
        Some((key, value))
    }
}

impl<'a> Iterator for Headers<'a> {
    type Item = (&'a [u8], Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let header = self.next_header();
        if header.is_none() {
            self.rest = &[];
        }
        header
    }
}

/// Why packed headers from outside (a policy's edit) cannot be taken.
pub fn check_headers(mut bytes: &[u8]) -> Result<(), &'static str> {
    while !bytes.is_empty() {
        let mut h = Headers::new(bytes);
        let (key, _) = h.next_header().ok_or("malformed packed headers")?;
        std::str::from_utf8(key).map_err(|_| "a header key that is not UTF-8 (Kafka header keys are strings)")?;
        bytes = h.rest;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_headers_from_outside_are_checked() {
        let mut data = Vec::new();
        pack_header(&mut data, b"a", Some(b"1"));
        pack_header(&mut data, b"null", None);
        pack_header(&mut data, b"", Some(b""));
        assert_eq!(check_headers(&data), Ok(()));
        assert_eq!(Headers::new(&data).count(), 3);
        assert!(check_headers(&data[..data.len() - 1]).is_err(), "a cut length");
        let mut bad_key = Vec::new();
        pack_header(&mut bad_key, &[0xff, 0xfe], None);
        assert!(check_headers(&bad_key).is_err());
        assert_eq!(Headers::new(&data[..data.len() - 1]).count(), 2, "a malformed tail ends the headers");
    }
}
