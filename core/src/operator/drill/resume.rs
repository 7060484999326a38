//! Whether a group that failed over resumed exactly: the records it read on the target against
//! the ones it had not read on the source, in order. Pure, so the drill's verdict is tested
//! apart from any cluster.

use std::collections::HashMap;

use serde::Serialize;

/// How one partition of the canary group resumed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Resumed {
    /// Records the group had not read on the source when it stopped.
    pub expected: u64,
    /// Records it read on the target.
    pub read: u64,
    /// Of the expected, records it never read: the failover skipped them.
    pub skipped: u64,
    /// Records it read that it had read on the source already, or read twice on the target.
    pub read_twice: u64,
    /// Whether the first record read on the target is the first one it had not read.
    pub first_is_next: bool,
}

impl Resumed {
    /// Nothing skipped, nothing read twice, and the group went on from the record after its stop.
    pub fn exact(&self) -> bool {
        self.skipped == 0 && self.read_twice == 0 && self.first_is_next
    }
}

/// Compares what the group read on the target (`read`, in order) with the records it had not
/// read on the source (`unread`, in order) and those it had (`done`). Records are identified by
/// their values, unique within the drill.
pub fn resumed<T: Eq + std::hash::Hash>(done: &[T], unread: &[T], read: &[T]) -> Resumed {
    let mut seen: HashMap<&T, u64> = HashMap::new();
    for r in read {
        *seen.entry(r).or_default() += 1;
    }
    let skipped = unread.iter().filter(|r| !seen.contains_key(r)).count() as u64;
    let again_on_target: u64 = seen.values().map(|n| n - 1).sum();
    let again_from_source = done.iter().filter(|r| seen.contains_key(r)).count() as u64;
    Resumed {
        expected: unread.len() as u64,
        read: read.len() as u64,
        skipped,
        read_twice: again_on_target + again_from_source,
        first_is_next: match (unread.first(), read.first()) {
            (Some(next), Some(first)) => next == first,
            (None, None) => true,
            _ => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn an_exact_resume() {
        let r = resumed(&[0, 1, 2], &[3, 4, 5], &[3, 4, 5]);
        assert!(r.exact(), "{r:?}");
        assert_eq!((r.expected, r.read), (3, 3));
    }

    #[test]
    fn a_resume_from_too_early_reads_twice_and_one_from_too_late_skips() {
        let early = resumed(&[0, 1, 2], &[3, 4], &[2, 3, 4]);
        assert_eq!((early.read_twice, early.skipped, early.first_is_next), (1, 0, false));
        let late = resumed(&[0, 1, 2], &[3, 4], &[4]);
        assert_eq!((late.read_twice, late.skipped, late.first_is_next), (0, 1, false));
    }

    proptest! {
        /// Resuming at any point of a partition: records before the stop come back as read
        /// twice, records after it are missing, one for one.
        #[test]
        fn resuming_off_by_k_counts_k(n in 2usize..200, stop_at in 0usize..200, resume_at in 0usize..200) {
            let (stop, resume) = (stop_at % n, resume_at % n);
            let all: Vec<usize> = (0..n).collect();
            let r = resumed(&all[..stop], &all[stop..], &all[resume..]);
            prop_assert_eq!(r.read_twice, stop.saturating_sub(resume) as u64);
            prop_assert_eq!(r.skipped, resume.saturating_sub(stop) as u64);
            prop_assert_eq!(r.exact(), stop == resume);
        }
    }
}
