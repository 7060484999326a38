//! The comparison `strait verify` makes for one partition, apart from any I/O: the records the
//! source says should be on the target (after the flow's policy), each with the target offset
//! the flow's stored mapping gives it, against the records the target holds there.
//!
//! Records are matched by content first where the mapping puts them, then anywhere in the
//! window: a record the mapping misplaces (an offset shift after a hand-made repair) is still
//! found, and counted as in order or not by where it was found, not by where it was expected.

use std::collections::HashMap;

use serde::Serialize;

use crate::record::{SourceOffset, TargetOffset};

/// A source record that should be on the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    /// Its offset on the source.
    pub source: SourceOffset,
    /// Where the stored mapping puts it on the target; `None` between runs (a pruned stretch
    /// of the mapping), where only its content can find it.
    pub at: Option<TargetOffset>,
    /// Digest of what the target should hold (key, value, headers, timestamp).
    pub digest: u64,
    /// Digest of its key alone: on a compacted target a newer record of the key replaces it.
    pub key: u64,
}

/// A record read from the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// Its offset on the target.
    pub offset: TargetOffset,
    /// Digest of its content, as [`Expected::digest`].
    pub digest: u64,
    /// True when the mapping traces it to a source offset that holds no record any more
    /// (compacted away): it is neither missing nor unexpected.
    pub source_gone: bool,
}

/// How many records of one kind, and the first of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    /// Records of this kind.
    pub records: u64,
    /// The lowest source offset involved, when the kind has one.
    pub first_source: Option<i64>,
    /// The lowest target offset involved, when the kind has one.
    pub first_target: Option<i64>,
}

impl Tally {
    fn add(&mut self, source: Option<SourceOffset>, target: Option<TargetOffset>) {
        self.records += 1;
        if let Some(s) = source {
            self.first_source = Some(self.first_source.map_or(s.get(), |f| f.min(s.get())));
        }
        if let Some(t) = target {
            self.first_target = Some(self.first_target.map_or(t.get(), |f| f.min(t.get())));
        }
    }

    /// Whether any record is of this kind.
    pub fn any(&self) -> bool {
        self.records > 0
    }
}

/// What the comparison of one partition found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Findings {
    /// Source records compared.
    pub expected: u64,
    /// Of those, found on the target with the same content.
    pub matched: u64,
    /// Source records with no copy on the target.
    pub missing: Tally,
    /// Target records that copy a source record found elsewhere too (at-least-once delivery
    /// re-sends records after a restart).
    pub duplicates: Tally,
    /// Source records found on the target, but not in source order.
    pub out_of_order: Tally,
    /// Source records whose place on the target holds something else.
    pub differs: Tally,
    /// Target records that copy nothing the source holds in the window.
    pub unexpected: Tally,
    /// Target records copied from source records compacted away since: not checked.
    pub compacted_on_source: u64,
    /// Source records absent from a compacted target that holds a newer record of their key.
    pub compacted_on_target: u64,
}

impl Findings {
    /// Whether the copy is good: every record there once, in order, as on the source.
    /// Duplicates count only when `duplicates_fail` (exactly-once flows, or when asked).
    pub fn clean(&self, duplicates_fail: bool) -> bool {
        !(self.missing.any()
            || self.out_of_order.any()
            || self.differs.any()
            || self.unexpected.any()
            || (duplicates_fail && self.duplicates.any()))
    }

    /// Adds `other`'s counts to these (a summary over partitions).
    pub fn absorb(&mut self, other: &Findings) {
        self.expected += other.expected;
        self.matched += other.matched;
        for (mine, theirs) in [
            (&mut self.missing, &other.missing),
            (&mut self.duplicates, &other.duplicates),
            (&mut self.out_of_order, &other.out_of_order),
            (&mut self.differs, &other.differs),
            (&mut self.unexpected, &other.unexpected),
        ] {
            mine.records += theirs.records;
            // Offsets of different partitions do not compare: a summary keeps counts only.
            mine.first_source = None;
            mine.first_target = None;
        }
        self.compacted_on_source += other.compacted_on_source;
        self.compacted_on_target += other.compacted_on_target;
    }
}

/// Compares `expected` (in source order) with `found` (in target order). `compacted_target`
/// says whether the target topic compacts, so a record replaced there by a newer one of its
/// key is not missing.
pub fn compare(expected: &[Expected], found: &[Found], compacted_target: bool) -> Findings {
    let mut out = Findings { expected: expected.len() as u64, ..Findings::default() };
    let by_offset: HashMap<TargetOffset, usize> = found.iter().enumerate().map(|(i, f)| (f.offset, i)).collect();
    let mut by_digest: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, f) in found.iter().enumerate().rev() {
        by_digest.entry(f.digest).or_default().push(i); // reversed: `pop` gives the lowest
    }
    let mut used = vec![false; found.len()];
    let mut matched: Vec<Option<usize>> = vec![None; expected.len()];

    // Where the mapping puts it, with the same content.
    for (e, m) in expected.iter().zip(matched.iter_mut()) {
        if let Some(&i) = e.at.and_then(|t| by_offset.get(&t)) {
            if found[i].digest == e.digest && !used[i] {
                used[i] = true;
                *m = Some(i);
            }
        }
    }
    // Anywhere else in the window, the first copy not taken yet.
    for (e, m) in expected.iter().zip(matched.iter_mut()).filter(|(_, m)| m.is_none()) {
        if let Some(copies) = by_digest.get_mut(&e.digest) {
            while let Some(i) = copies.pop() {
                if !used[i] {
                    used[i] = true;
                    *m = Some(i);
                    break;
                }
            }
        }
    }
    // Not found anywhere: its place holds something else, or nothing.
    let mut newest_key: HashMap<u64, usize> = HashMap::new();
    if compacted_target {
        for (n, e) in expected.iter().enumerate().filter(|(n, _)| matched[*n].is_some()) {
            newest_key.insert(e.key, n);
        }
    }
    for (n, e) in expected.iter().enumerate().filter(|(n, _)| matched[*n].is_none()) {
        match e.at.and_then(|t| by_offset.get(&t)).filter(|&&i| !used[i]) {
            Some(&i) => {
                used[i] = true;
                out.differs.add(Some(e.source), Some(found[i].offset));
            }
            None if newest_key.get(&e.key).is_some_and(|&newer| newer > n) => out.compacted_on_target += 1,
            None => out.missing.add(Some(e.source), e.at),
        }
    }
    out.matched = matched.iter().filter(|m| m.is_some()).count() as u64;
    for n in out_of_order(&matched) {
        out.out_of_order.add(Some(expected[n].source), matched[n].map(|i| found[i].offset));
    }
    // What is left on the target copies nothing the window expected once more.
    let mut sources: HashMap<u64, SourceOffset> = HashMap::with_capacity(expected.len());
    for e in expected {
        sources.entry(e.digest).or_insert(e.source);
    }
    for (f, _) in found.iter().zip(&used).filter(|(_, used)| !**used) {
        if f.source_gone {
            out.compacted_on_source += 1;
        } else if let Some(&source) = sources.get(&f.digest) {
            out.duplicates.add(Some(source), Some(f.offset));
        } else {
            out.unexpected.add(None, Some(f.offset));
        }
    }
    out
}

/// The matched records (by index into `matched`) outside a longest run of rising target
/// positions: the fewest records whose moving would put the rest in source order.
fn out_of_order(matched: &[Option<usize>]) -> Vec<usize> {
    let found: Vec<(usize, usize)> = matched.iter().enumerate().filter_map(|(n, m)| m.map(|i| (n, i))).collect();
    // Patience sorting: `tails[k]` is the index in `found` ending the best rising run of k+1.
    let mut tails: Vec<usize> = Vec::new();
    let mut before: Vec<Option<usize>> = vec![None; found.len()];
    for (j, &(_, pos)) in found.iter().enumerate() {
        let k = tails.partition_point(|&t| found[t].1 < pos);
        before[j] = k.checked_sub(1).map(|k| tails[k]);
        if k == tails.len() {
            tails.push(j);
        } else {
            tails[k] = j;
        }
    }
    let mut in_order = vec![false; found.len()];
    let mut at = tails.last().copied();
    while let Some(j) = at {
        in_order[j] = true;
        at = before[j];
    }
    found.iter().zip(in_order).filter(|(_, keep)| !keep).map(|(&(n, _), _)| n).collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A source of `n` distinct records copied one for one from target offset `shift`.
    fn copy(n: usize, shift: i64) -> (Vec<Expected>, Vec<Found>) {
        let expected: Vec<Expected> = (0..n)
            .map(|i| Expected {
                source: SourceOffset(i as i64),
                at: Some(TargetOffset(i as i64 + shift)),
                digest: 1000 + i as u64,
                key: i as u64,
            })
            .collect();
        let found = expected
            .iter()
            .map(|e| Found { offset: e.at.unwrap_or(TargetOffset(-1)), digest: e.digest, source_gone: false })
            .collect();
        (expected, found)
    }

    /// Renumbers target records after an edit, as a log does: consecutive offsets from `from`.
    fn renumber(found: &mut [Found], from: i64) {
        for (i, f) in found.iter_mut().enumerate() {
            f.offset = TargetOffset(from + i as i64);
        }
    }

    #[test]
    fn an_exact_copy_is_clean() {
        let (e, f) = copy(50, 7);
        let out = compare(&e, &f, false);
        assert_eq!(out.matched, 50);
        assert!(out.clean(true), "{out:?}");
    }

    #[test]
    fn a_deleted_record_is_missing_and_named() {
        let (e, mut f) = copy(10, 0);
        f.remove(4);
        let out = compare(&e, &f, false);
        assert_eq!(out.missing, Tally { records: 1, first_source: Some(4), first_target: Some(4) });
        assert!(!out.clean(false));
    }

    #[test]
    fn records_after_a_deletion_that_shifted_still_match_in_order() {
        let (e, mut f) = copy(10, 0);
        f.remove(4);
        renumber(&mut f, 0); // the log closed the gap: every later record sits one early
        let out = compare(&e, &f, false);
        assert_eq!(out.missing.records, 1);
        assert_eq!(out.matched, 9);
        assert_eq!(out.out_of_order.records, 0);
        assert_eq!(out.differs.records, 0, "{out:?}");
    }

    #[test]
    fn a_copy_sent_twice_is_a_duplicate_which_fails_only_when_asked() {
        let (e, mut f) = copy(10, 0);
        let again = f[3];
        f.insert(6, again);
        renumber(&mut f, 0);
        let out = compare(&e, &f, false);
        assert_eq!(out.duplicates.records, 1);
        assert_eq!(out.duplicates.first_source, Some(3));
        assert_eq!(out.missing.records + out.differs.records + out.out_of_order.records, 0, "{out:?}");
        assert!(out.clean(false));
        assert!(!out.clean(true));
    }

    #[test]
    fn an_altered_record_differs_at_its_place() {
        let (e, mut f) = copy(10, 100);
        f[5].digest = 9;
        let out = compare(&e, &f, false);
        assert_eq!(out.differs, Tally { records: 1, first_source: Some(5), first_target: Some(105) });
        assert_eq!(out.missing.records + out.unexpected.records, 0);
    }

    #[test]
    fn two_swapped_records_put_one_out_of_order() {
        let (e, mut f) = copy(10, 0);
        f.swap(2, 3);
        renumber(&mut f, 0);
        let out = compare(&e, &f, false);
        assert_eq!(out.out_of_order.records, 1);
        assert_eq!(out.matched, 10);
    }

    #[test]
    fn a_truncated_tail_is_missing_from_its_first_record() {
        let (e, mut f) = copy(10, 0);
        f.truncate(6);
        let out = compare(&e, &f, false);
        assert_eq!(out.missing, Tally { records: 4, first_source: Some(6), first_target: Some(6) });
    }

    #[test]
    fn a_record_compacted_away_on_either_side_is_not_an_error() {
        let (mut e, mut f) = copy(6, 0);
        // Source compaction: the source no longer has record 2; its copy maps back to nothing.
        e.remove(2);
        f[2].source_gone = true;
        // Target compaction: record 4's key was written again by record 5.
        e[3].key = 77; // source offset 4
        e[4].key = 77; // source offset 5
        f.remove(4);
        let out = compare(&e, &f, true);
        assert_eq!(out.compacted_on_source, 1);
        assert_eq!(out.compacted_on_target, 1);
        assert!(out.clean(true), "{out:?}");
        assert_eq!(compare(&e, &f, false).missing.records, 1, "an uncompacted target misses it");
    }

    #[test]
    fn a_foreign_record_on_the_target_is_unexpected() {
        let (e, mut f) = copy(4, 0);
        f.push(Found { offset: TargetOffset(4), digest: 5, source_gone: false });
        let out = compare(&e, &f, false);
        assert_eq!(out.unexpected, Tally { records: 1, first_source: None, first_target: Some(4) });
    }

    proptest! {
        /// Each change made to an exact copy is counted once, under its own name, and nothing
        /// else is reported.
        #[test]
        fn each_change_is_found_once(
            n in 5usize..200,
            shift in 0i64..1000,
            deleted in proptest::collection::btree_set(0usize..200, 0..10),
            doubled in proptest::collection::btree_set(0usize..200, 0..10),
            altered in proptest::collection::btree_set(0usize..200, 0..10),
        ) {
            let (e, f) = copy(n, shift);
            let deleted: Vec<usize> = deleted.into_iter().filter(|&i| i < n).collect();
            let altered: Vec<usize> = altered.into_iter().filter(|&i| i < n && !deleted.contains(&i)).collect();
            let doubled: Vec<usize> =
                doubled.into_iter().filter(|&i| i < n && !deleted.contains(&i) && !altered.contains(&i)).collect();
            let mut target: Vec<Found> = Vec::new();
            for (i, mut r) in f.into_iter().enumerate() {
                if deleted.contains(&i) {
                    continue; // compacted or deleted by hand: its offset stays empty
                }
                if altered.contains(&i) {
                    r.digest = 1_000_000 + i as u64;
                }
                target.push(r);
            }
            // Copies sent again land after everything, as a restart re-sends them.
            let end = shift + n as i64;
            for (k, &i) in doubled.iter().enumerate() {
                target.push(Found { offset: TargetOffset(end + k as i64), digest: 1000 + i as u64, source_gone: false });
            }
            let out = compare(&e, &target, false);
            prop_assert_eq!(out.missing.records, deleted.len() as u64);
            prop_assert_eq!(out.differs.records, altered.len() as u64);
            prop_assert_eq!(out.duplicates.records, doubled.len() as u64);
            prop_assert_eq!(out.out_of_order.records, 0);
            prop_assert_eq!(out.unexpected.records, 0);
            prop_assert_eq!(out.matched, (n - deleted.len() - altered.len()) as u64);
            prop_assert_eq!(out.missing.first_source, deleted.first().map(|&i| i as i64));
        }

        /// Moving one record elsewhere in an exact copy puts exactly one record out of order.
        #[test]
        fn one_moved_record_is_one_out_of_order(n in 3usize..100, from in 0usize..100, to in 0usize..100) {
            let (e, mut f) = copy(n, 0);
            let (from, to) = (from % n, to % n);
            prop_assume!(from != to);
            let r = f.remove(from);
            f.insert(to, r);
            renumber(&mut f, 0);
            let out = compare(&e, &f, false);
            prop_assert_eq!(out.out_of_order.records, 1);
            prop_assert_eq!(out.matched, n as u64);
            prop_assert!(!out.missing.any() && !out.differs.any() && !out.duplicates.any());
        }
    }
}
