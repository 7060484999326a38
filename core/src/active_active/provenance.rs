//! The provenance header: the aliases of the clusters a record has been on before the one it
//! is read from, oldest first, comma-separated (aliases are listed in `clusters`, so they hold
//! no comma). A record without it was written where it is read: that cluster is its origin.

use crate::config::FlowConfig;
use crate::policy::{PolicyError, ReplicationPolicy};
use crate::record::{pack_header, pack_header_parts, Batch, Headers};

/// The header's key.
pub const HEADER: &str = "strait.provenance";

/// Whether `flow` carries the header: as `provenance.enabled` says, or by default when its
/// remote topics keep their names, which then cannot tell where a record came from.
pub fn enabled(flow: &FlowConfig, naming: &dyn ReplicationPolicy) -> Result<bool, PolicyError> {
    match flow.provenance {
        Some(on) => Ok(on),
        None => Ok(naming.format_remote_topic(flow.source.as_str(), "strait-probe")? == "strait-probe"),
    }
}

/// The header's value among `headers`, if there is one.
pub fn of(mut headers: Headers<'_>) -> Option<&[u8]> {
    headers.find(|(k, _)| *k == HEADER.as_bytes()).and_then(|(_, v)| v)
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

/// Sets the header of record `i` of `batch` to its path followed by `read_from`, the cluster
/// the record leaves now; the other headers keep their order. `scratch` is reused across calls.
pub fn extend(batch: &mut Batch, i: usize, read_from: &str, scratch: &mut Vec<u8>) {
    let Some(record) = batch.records.get(i) else { return };
    scratch.clear();
    let mut found = false;
    for (key, value) in batch.headers(record) {
        if key != HEADER.as_bytes() || found {
            pack_header(scratch, key, value);
            continue;
        }
        found = true;
        let path = value.unwrap_or_default();
        let comma: &[u8] = if path.is_empty() { b"" } else { b"," };
        pack_header_parts(scratch, key, Some(&[path, comma, read_from.as_bytes()]));
    }
    if !found {
        pack_header(scratch, HEADER.as_bytes(), Some(read_from.as_bytes()));
    }
    let headers = batch.put(scratch);
    batch.records[i].headers = headers;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_grows_by_one_alias_per_hop_and_names_its_origin_first() {
        let mut batch = Batch::default();
        batch.push(0, crate::record::SourceOffset(0), 0, None, None, [(&b"trace"[..], None)]);
        let mut scratch = Vec::new();
        assert_eq!(origin(of(batch.headers(&batch.records[0])), "us-east"), "us-east");
        extend(&mut batch, 0, "us-east", &mut scratch);
        assert_eq!(of(batch.headers(&batch.records[0])), Some(&b"us-east"[..]));
        extend(&mut batch, 0, "eu-west", &mut scratch);
        let path = of(batch.headers(&batch.records[0])).unwrap();
        assert_eq!(path, b"us-east,eu-west");
        assert_eq!(origin(Some(path), "ap-south"), "us-east");
        assert!(contains(path, "eu-west") && contains(path, "us-east"));
        assert!(!contains(path, "us") && !contains(path, "west"), "whole aliases only");
        let headers: Vec<_> = batch.headers(&batch.records[0]).collect();
        assert_eq!(headers[0], (&b"trace"[..], None), "other headers stay as they were");
        assert_eq!(headers.len(), 2);
    }
}
