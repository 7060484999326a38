//! Every interface of the `policy` world must be exported, but strait only calls the hooks a
//! component lists in `hooks()`. These macros write the neutral bodies of the others, so a
//! policy crate holds only the logic it means. Invoke them next to `wit_bindgen::generate!`;
//! the paths they name resolve in the calling crate's generated bindings.

/// `filters`: every topic, group and config passes.
#[macro_export]
macro_rules! neutral_filters {
    ($policy:ty) => {
        impl exports::strait::policy::filters::Guest for $policy {
            fn topic(_topic: String) -> bool {
                true
            }
            fn group(_group: String) -> bool {
                true
            }
            fn topic_config(_key: String) -> bool {
                true
            }
        }
    };
}

/// `records`: no change.
#[macro_export]
macro_rules! neutral_records {
    ($policy:ty) => {
        impl exports::strait::policy::records::Guest for $policy {
            fn on_batch(_records: strait::policy::types::Batch) -> Result<strait::policy::types::Verdict, String> {
                Ok(strait::policy::types::Verdict { drop: Vec::new(), edits: Vec::new() })
            }
        }
    };
}

/// `conflicts`: every record is written.
#[macro_export]
macro_rules! neutral_conflicts {
    ($policy:ty) => {
        impl exports::strait::policy::conflicts::Guest for $policy {
            fn resolve(
                _arriving: strait::policy::types::Incoming,
                _known: Option<strait::policy::types::KeyState>,
            ) -> bool {
                true
            }
        }
    };
}

/// `naming`: identity names and MM2's fixed internal topic names, for components that do not
/// list `naming` (strait then names with its built-in policy).
#[macro_export]
macro_rules! neutral_naming {
    ($policy:ty) => {
        impl exports::strait::policy::naming::Guest for $policy {
            fn format_remote_topic(_source_alias: String, topic: String) -> String {
                topic
            }
            fn topic_source(_topic: String) -> Option<String> {
                None
            }
            fn upstream_topic(_topic: String) -> Option<String> {
                None
            }
            fn is_internal_topic(_topic: String) -> bool {
                false
            }
            fn heartbeats_topic() -> String {
                "heartbeats".into()
            }
            fn checkpoints_topic(cluster_alias: String) -> String {
                format!("{cluster_alias}.checkpoints.internal")
            }
            fn offset_syncs_topic(cluster_alias: String) -> String {
                format!("mm2-offset-syncs.{cluster_alias}.internal")
            }
        }
    };
}
