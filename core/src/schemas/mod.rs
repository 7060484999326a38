//! Schemas follow the records: a flow whose clusters both name a schema registry copies the
//! subjects of the topics it replicates to the target's registry (names following the topics'
//! remote names), and carries the schema id in every key and value written in Confluent's
//! wire format across: rewritten to the target's id (`schema.ids = translate`) or kept, the
//! target registry having taken the source's ids (`keep`). A batch that carries a schema not yet
//! on the target waits for it, so no record reaches the target before its schema.

mod ids;
mod registry;
mod subjects;
mod translate;
pub mod wire;
mod worker;

pub use ids::{IdTable, Resolved};
pub use registry::{Registry, RegistryError, Schema, SchemaReference, SubjectVersion};
pub use subjects::target_subject;
pub use translate::{Counts, SchemaIds};
pub use worker::{SchemaWorker, SourceTopics};
