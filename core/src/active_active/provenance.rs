//! The provenance header: the aliases of the clusters a record has been on before the one it
//! is read from, oldest first, comma-separated (aliases are listed in `clusters`, so they hold
//! no comma). A record without it was written where it is read: that cluster is its origin.

use crate::pipeline::Header;

/// The header's key.
pub const HEADER: &str = "strait.provenance";

/// The header's value on a record, if it has one.
pub fn of(headers: &[Header]) -> Option<&[u8]> {
    headers.iter().find(|h| h.key == HEADER).and_then(|h| h.value.as_deref())
}

/// Whether the cluster `alias` is in `path`.
pub fn contains(path: &[u8], alias: &str) -> bool {
    path.split(|&b| b == b',').any(|a| a == alias.as_bytes())
}

/// The cluster a record was first written to: the first alias of its path, or the cluster it
/// is read from when it has none.
pub fn origin<'a>(path: Option<&'a [u8]>, read_from: &'a str) -> &'a str {
    path.and_then(|p| p.split(|&b| b == b',').next())
        .and_then(|a| std::str::from_utf8(a).ok())
        .filter(|a| !a.is_empty())
        .unwrap_or(read_from)
}

/// Sets the header to `path` followed by `read_from`, the cluster the record leaves now.
pub fn extend(headers: &mut Vec<Header>, read_from: &str) {
    match headers.iter_mut().find(|h| h.key == HEADER) {
        Some(h) => {
            let value = h.value.get_or_insert_with(Vec::new);
            if !value.is_empty() {
                value.push(b',');
            }
            value.extend_from_slice(read_from.as_bytes());
        }
        None => headers.push(Header { key: HEADER.into(), value: Some(read_from.as_bytes().to_vec()) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_grows_by_one_alias_per_hop_and_names_its_origin_first() {
        let mut headers = vec![Header { key: "trace".into(), value: None }];
        assert_eq!(origin(of(&headers), "us-east"), "us-east");
        extend(&mut headers, "us-east");
        assert_eq!(of(&headers), Some(&b"us-east"[..]));
        extend(&mut headers, "eu-west");
        let path = of(&headers).unwrap();
        assert_eq!(path, b"us-east,eu-west");
        assert_eq!(origin(Some(path), "ap-south"), "us-east");
        assert!(contains(path, "eu-west") && contains(path, "us-east"));
        assert!(!contains(path, "us") && !contains(path, "west"), "whole aliases only");
        assert_eq!(headers[0].key, "trace", "other headers stay as they were");
    }
}
