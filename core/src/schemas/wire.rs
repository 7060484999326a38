//! Confluent's wire format: a key or value written by a Confluent-format serializer starts with
//! the magic byte 0 and the 4-byte big-endian id of its schema in the registry. What follows
//! (Protobuf's message indexes, then the encoded data) is the serializer's and stays as it is.

/// The first byte of a record in the wire format.
pub const MAGIC: u8 = 0;

/// Bytes before the serialized data: the magic byte and the id.
pub const PREFIX_LEN: usize = 5;

/// The schema id `bytes` carry, if they are in the wire format: the magic byte and at least a
/// whole id. Data that happens to start with a zero byte is read as wire format too; the id it
/// names is then checked against the source registry like any other.
pub fn schema_id(bytes: &[u8]) -> Option<u32> {
    match bytes {
        [MAGIC, a, b, c, d, ..] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

/// Writes `id` over the id of `bytes`, which [`schema_id`] read as wire format; every other
/// byte stays as it was. Bytes not in the wire format are left alone.
pub fn rewrite_id(bytes: &mut [u8], id: u32) {
    if schema_id(bytes).is_some() {
        bytes[1..PREFIX_LEN].copy_from_slice(&id.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_the_id_only_after_the_magic_byte() {
        assert_eq!(schema_id(&[0, 0, 0, 1, 2, 0xAA]), Some(258));
        assert_eq!(schema_id(&[0, 0, 0, 0, 7]), Some(7), "no data after the id is still an id");
        assert_eq!(schema_id(&[1, 0, 0, 0, 7, 9]), None, "another magic byte");
        assert_eq!(schema_id(&[0, 0, 0, 7]), None, "too short for an id");
        assert_eq!(schema_id(b""), None);
        assert_eq!(schema_id(b"{\"plain\":\"json\"}"), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// The rewrite changes the four id bytes and nothing else: Protobuf message indexes and
        /// the data after them are the serializer's.
        #[test]
        fn a_rewrite_changes_the_id_and_nothing_else(
            id in any::<u32>(),
            new in any::<u32>(),
            rest in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut bytes = vec![MAGIC];
            bytes.extend_from_slice(&id.to_be_bytes());
            bytes.extend_from_slice(&rest);
            let before = bytes.clone();
            rewrite_id(&mut bytes, new);
            prop_assert_eq!(schema_id(&bytes), Some(new));
            prop_assert_eq!(bytes.len(), before.len());
            prop_assert_eq!(bytes[0], MAGIC);
            prop_assert_eq!(&bytes[PREFIX_LEN..], &before[PREFIX_LEN..]);
        }

        /// Bytes not in the wire format pass untouched.
        #[test]
        fn bytes_not_in_the_wire_format_are_never_touched(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            new in any::<u32>(),
        ) {
            prop_assume!(bytes.len() < PREFIX_LEN || bytes[0] != MAGIC);
            let mut after = bytes.clone();
            rewrite_id(&mut after, new);
            prop_assert_eq!(after, bytes);
        }
    }
}
