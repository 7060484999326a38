//! Entries indexed by a small dense number (a slot, a partition) that appear on first use.

use std::ops::{Deref, DerefMut};

/// A vector indexed by a dense id: [`SlotVec::entry`] grows it with default entries up to the
/// id it is asked for, so ids handed out in order cost one slot each and no map lookups. Reads
/// go through the slice it derefs to (`get`, `iter`, indexing).
///
/// ```
/// use strait_core::slot_vec::SlotVec;
/// let mut v: SlotVec<u32> = SlotVec::default();
/// *v.entry(2) += 5;
/// assert_eq!(&v[..], &[0, 0, 5]);
/// assert_eq!(v.get(7), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotVec<T> {
    entries: Vec<T>,
}

impl<T> Default for SlotVec<T> {
    fn default() -> Self {
        Self { entries: Vec::new() }
    }
}

impl<T: Default> SlotVec<T> {
    /// The entry at `i`, made (with defaults before it) if the vector is shorter.
    pub fn entry(&mut self, i: usize) -> &mut T {
        if self.entries.len() <= i {
            self.entries.resize_with(i + 1, T::default);
        }
        &mut self.entries[i]
    }
}

impl<T> Deref for SlotVec<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.entries
    }
}

impl<T> DerefMut for SlotVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.entries
    }
}

impl<'a, T> IntoIterator for &'a SlotVec<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter()
    }
}

impl<'a, T> IntoIterator for &'a mut SlotVec<T> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter_mut()
    }
}
