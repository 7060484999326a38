//! The record level: what the stages pass on and what the policy's hooks see. A [`Batch`] of
//! [`Record`]s in one buffer, the edits a hook asks for, the packed headers, the offsets that say
//! which log they count in ([`SourceOffset`], [`TargetOffset`]), and the traits a filter or
//! transform implements. It stands on nothing else of the engine, so the data path
//! (`pipeline`), the policy and active-active all build on it without reaching for each other.

mod batch;
mod error;
mod headers;
mod offset;
mod stage;

pub use batch::{Batch, Record, RecordEdit, SlotId, Span};
pub use error::HookError;
pub(crate) use headers::NULL;
pub use headers::{check_headers, pack_header, pack_header_parts, Headers};
pub use offset::{SourceOffset, TargetOffset};
pub use stage::{KeepAll, RecordFilter, RecordTransform, Unchanged};
