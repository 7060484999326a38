//! Offsets that say which log they belong to. A source offset and a target offset are both
//! `i64` to librdkafka, and swapping the two would corrupt the offset mapping silently, so the
//! engine keeps them apart as [`SourceOffset`] and [`TargetOffset`]; bare `i64`s appear only
//! where librdkafka or a wire encoding is touched.

use std::fmt;

/// Defines one offset type: the operations the bookkeeping needs and nothing more.
macro_rules! offset_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub i64);

        impl $name {
            /// The offset as librdkafka and the wire encodings take it.
            pub const fn get(self) -> i64 {
                self.0
            }

            /// The offset of the record right after this one.
            pub const fn next(self) -> Self {
                Self(self.0 + 1)
            }

            /// The offset of the record right before this one; `None` below `i64::MIN + 1`.
            pub fn previous(self) -> Option<Self> {
                self.0.checked_sub(1).map(Self)
            }

            /// The offset `records` records after this one (before it when negative).
            pub const fn after(self, records: i64) -> Self {
                Self(self.0 + records)
            }

            /// How many records lie from `earlier` up to this offset (negative when `earlier`
            /// is later).
            pub const fn since(self, earlier: Self) -> i64 {
                self.0 - earlier.0
            }
        }

        impl fmt::Display for $name {
            /// The bare number, as log lines and messages always showed it.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

offset_type! {
    /// An offset in a source partition.
    ///
    /// ```
    /// use strait_core::record::SourceOffset;
    /// let first = SourceOffset(10);
    /// assert_eq!(first.next(), SourceOffset(11));
    /// assert_eq!(first.after(5).since(first), 5);
    /// assert_eq!(first.to_string(), "10");
    /// ```
    SourceOffset
}

offset_type! {
    /// An offset in the remote (target) partition a source record landed in.
    ///
    /// ```
    /// use strait_core::record::TargetOffset;
    /// let landed = TargetOffset(7);
    /// assert_eq!(landed.previous(), Some(TargetOffset(6)));
    /// assert_eq!(landed.get(), 7);
    /// assert_eq!(format!("at {landed}"), "at 7");
    /// ```
    TargetOffset
}
