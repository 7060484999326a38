//! What strait knows of each key on each cluster: the newest write it has seen there, by
//! `(timestamp, origin)`. Shared by every flow of the process, because the flow that delivers
//! to a cluster learns about that cluster's own writes from the flow that reads from it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The newest write of a key seen on a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// Its timestamp in milliseconds.
    pub timestamp: i64,
    /// The alias of the cluster it was first written to.
    pub origin: Arc<str>,
}

/// Cluster → topic → key → newest version. One entry per key and cluster: the key's bytes and
/// about 64 bytes; a process that sees many millions of keys needs that memory.
#[derive(Debug, Default)]
pub struct KeyStates {
    inner: Mutex<Table>,
}

/// The table behind the lock, for one batch at a time.
#[derive(Debug, Default)]
pub struct Table {
    clusters: HashMap<String, HashMap<String, HashMap<Vec<u8>, Version>>>,
    origins: Vec<Arc<str>>,
}

impl KeyStates {
    /// Locks the table for a batch.
    pub fn lock(&self) -> MutexGuard<'_, Table> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Table {
    /// Notes that `key` of `topic` was written on `cluster` at `timestamp`, first on `origin`;
    /// keeps the newest.
    pub fn observe(&mut self, cluster: &str, topic: &str, key: &[u8], timestamp: i64, origin: &str) {
        let origin = match self.origins.iter().find(|o| &***o == origin) {
            Some(o) => o.clone(),
            None => {
                self.origins.push(Arc::from(origin));
                self.origins[self.origins.len() - 1].clone()
            }
        };
        let topics = match self.clusters.get_mut(cluster) {
            Some(t) => t,
            None => self.clusters.entry(cluster.to_string()).or_default(),
        };
        let keys = match topics.get_mut(topic) {
            Some(k) => k,
            None => topics.entry(topic.to_string()).or_default(),
        };
        match keys.get_mut(key) {
            Some(v) if (timestamp, &*origin) >= (v.timestamp, &*v.origin) => *v = Version { timestamp, origin },
            Some(_) => {}
            None => {
                keys.insert(key.to_vec(), Version { timestamp, origin });
            }
        }
    }

    /// The newest write of `key` seen on `cluster`, if any.
    pub fn known(&self, cluster: &str, topic: &str, key: &[u8]) -> Option<&Version> {
        self.clusters.get(cluster)?.get(topic)?.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_write_per_cluster_is_kept_with_ties_to_the_greater_origin() {
        let states = KeyStates::default();
        let mut t = states.lock();
        t.observe("us-west", "orders", b"k", 10, "us-west");
        t.observe("us-west", "orders", b"k", 9, "us-east");
        assert_eq!(t.known("us-west", "orders", b"k").map(|v| (v.timestamp, &*v.origin)), Some((10, "us-west")));
        t.observe("us-west", "orders", b"k", 10, "us-east");
        assert_eq!(t.known("us-west", "orders", b"k").map(|v| &*v.origin), Some("us-west"));
        t.observe("us-west", "orders", b"k", 10, "us-z");
        assert_eq!(t.known("us-west", "orders", b"k").map(|v| &*v.origin), Some("us-z"));
        assert_eq!(t.known("us-east", "orders", b"k"), None, "clusters are kept apart");
        assert_eq!(t.known("us-west", "other", b"k"), None, "topics are kept apart");
    }
}
