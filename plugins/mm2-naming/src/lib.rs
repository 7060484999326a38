//! MirrorMaker 2's topic naming rules (`DefaultReplicationPolicy`), as plain functions so the
//! default and identity components share one copy and tests run on the host.

/// MM2 `formatRemoteTopic`.
pub fn format_remote_topic(sep: &str, source_alias: &str, topic: &str) -> String {
    format!("{source_alias}{sep}{topic}")
}

/// MM2 `topicSource`: the first token, when splitting on the separator gives two or more
/// (Java's `split` drops trailing empty tokens).
pub fn topic_source(sep: &str, topic: &str) -> Option<String> {
    let mut parts = topic.split(sep);
    let first = parts.next()?;
    parts.any(|p| !p.is_empty()).then(|| first.to_string())
}

/// MM2 `upstreamTopic`.
pub fn upstream_topic(sep: &str, topic: &str) -> Option<String> {
    let source = topic_source(sep, topic)?;
    Some(topic[source.len() + sep.len()..].to_string())
}

/// MM2 `checkpointsTopic` with `replication.policy.internal.topic.separator.enabled`.
pub fn checkpoints_topic(sep: &str, alias: &str) -> String {
    format!("{alias}{sep}checkpoints.internal")
}

/// MM2 `offsetSyncsTopic` with `replication.policy.internal.topic.separator.enabled`.
pub fn offset_syncs_topic(sep: &str, alias: &str) -> String {
    format!("mm2-offset-syncs{sep}{alias}{sep}internal")
}

/// MM2 `isInternalTopic`: Kafka's (`__*`, `.*`), Connect's and MM2's (`*.internal`,
/// `*-internal`, checkpoints) topics.
pub fn is_internal_topic(sep: &str, topic: &str) -> bool {
    let mm2 = (topic.starts_with("mm2") && topic.ends_with("internal"))
        || topic.ends_with(&format!("{sep}checkpoints.internal"));
    mm2 || topic.starts_with("__")
        || topic.starts_with('.')
        || topic.ends_with("-internal")
        || topic.ends_with(".internal")
}

/// The `naming` methods MM2 names the same way under any remote-topic rule: internal topics,
/// heartbeats, checkpoints and offset syncs. Used inside an `impl naming::Guest` block, with
/// the function that gives the configured separator.
#[macro_export]
macro_rules! mm2_internal_names {
    ($separator:path) => {
        fn is_internal_topic(topic: String) -> bool {
            $crate::is_internal_topic($separator(), &topic)
        }
        fn heartbeats_topic() -> String {
            "heartbeats".into()
        }
        fn checkpoints_topic(cluster_alias: String) -> String {
            $crate::checkpoints_topic($separator(), &cluster_alias)
        }
        fn offset_syncs_topic(cluster_alias: String) -> String {
            $crate::offset_syncs_topic($separator(), &cluster_alias)
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_like_mm2() {
        assert_eq!(format_remote_topic(".", "us-east", "orders"), "us-east.orders");
        assert_eq!(topic_source(".", "us-east.orders").as_deref(), Some("us-east"));
        assert_eq!(upstream_topic(".", "us-west.us-east.orders").as_deref(), Some("us-east.orders"));
        assert_eq!(topic_source(".", "orders"), None);
        assert_eq!(topic_source(".", "orders."), None);
        assert_eq!(upstream_topic("__", "a__t.x").as_deref(), Some("t.x"));
        assert_eq!(checkpoints_topic(".", "us-east"), "us-east.checkpoints.internal");
        assert_eq!(offset_syncs_topic(".", "us-east"), "mm2-offset-syncs.us-east.internal");
        for t in
            ["__consumer_offsets", "mm2-offsets.a.internal", "connect-internal", ".hidden", "a.checkpoints.internal"]
        {
            assert!(is_internal_topic(".", t), "{t}");
        }
        assert!(!is_internal_topic(".", "heartbeats"));
    }
}
