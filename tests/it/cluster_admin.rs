//! strait's own wrappers of Admin API calls rdkafka does not wrap (IncrementalAlterConfigs,
//! CreateAcls, DescribeAcls), against a real cluster with KRaft's StandardAuthorizer and the
//! shared `us-west`, which has none.

use std::time::Duration;

use crate::support::*;
use rdkafka::admin::{AdminClient, AdminOptions, ConfigSource, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use strait_core::cluster::{
    create_topic_acls, describe_topic_acls, incremental_alter_topic_configs, AclOperation, ConfigOp, TopicAcl,
};

/// The request timeout of every call under test.
const TIMEOUT: Duration = Duration::from_secs(30);
/// How long a broker may take to show a committed change (KRaft applies metadata asynchronously).
const SETTLE: Duration = Duration::from_secs(30);
const NO_AUTHORIZER: &str =
    "the cluster has no authorizer (SECURITY_DISABLED): set `authorizer.class.name` on its brokers or turn off `sync.topic.acls.enabled`";

fn admin(bootstrap: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new().set("bootstrap.servers", bootstrap).create().expect("admin client")
}

/// `key`'s value and source on `topic`, as rdkafka's own DescribeConfigs reports them.
fn topic_config(admin: &AdminClient<DefaultClientContext>, topic: &str, key: &str) -> (Option<String>, ConfigSource) {
    let opts = AdminOptions::new().request_timeout(Some(TIMEOUT));
    let results = block_on(admin.describe_configs(&[ResourceSpecifier::Topic(topic)], &opts))
        .unwrap_or_else(|e| panic!("describe {topic}: {e}"));
    let resource =
        results.into_iter().next().expect("one resource answered").unwrap_or_else(|e| panic!("describe {topic}: {e}"));
    let entry =
        resource.entries.into_iter().find(|e| e.name == key).unwrap_or_else(|| panic!("{topic} lists no `{key}`"));
    (entry.value, entry.source)
}

/// `User:alice` from any host may READ `topic` (a literal binding).
fn alice_reads(topic: String) -> TopicAcl {
    TopicAcl {
        topic,
        prefixed: false,
        principal: "User:alice".into(),
        host: "*".into(),
        operation: AclOperation::Read,
        allow: true,
    }
}

fn set(key: &str, value: &str) -> (String, ConfigOp) {
    (key.to_string(), ConfigOp::Set(value.to_string()))
}

#[test]
fn configs_and_acls_on_a_cluster_with_an_authorizer() {
    let cluster = OwnCluster::start_with_authorizer("admin-acl", 28092);
    let admin = admin(&cluster.bootstrap);
    incremental_alter_changes_only_the_keys_it_names(&cluster.bootstrap, &admin);
    acls_are_created_idempotently_and_described_exactly(&admin);
}

fn incremental_alter_changes_only_the_keys_it_names(bootstrap: &str, admin: &AdminClient<DefaultClientContext>) {
    let client = admin.inner();
    let topic = unique("alter");
    create_topic(bootstrap, &topic, 1, 1, &[]);

    incremental_alter_topic_configs(
        client,
        &topic,
        &[set("retention.bytes", "1048576"), set("retention.ms", "3600000")],
        TIMEOUT,
    )
    .unwrap_or_else(|e| panic!("set: {e}"));
    assert!(
        wait_until(SETTLE, || topic_config(admin, &topic, "retention.bytes").0.as_deref() == Some("1048576")),
        "retention.bytes still {:?} {SETTLE:?} after the Set",
        topic_config(admin, &topic, "retention.bytes")
    );
    assert_eq!(topic_config(admin, &topic, "retention.bytes").1, ConfigSource::DynamicTopic);
    assert_eq!(topic_config(admin, &topic, "retention.ms").0.as_deref(), Some("3600000"));

    // Delete one key: it falls back to the broker's default; the other keeps its value.
    incremental_alter_topic_configs(client, &topic, &[("retention.bytes".to_string(), ConfigOp::Delete)], TIMEOUT)
        .unwrap_or_else(|e| panic!("delete: {e}"));
    assert!(
        wait_until(SETTLE, || topic_config(admin, &topic, "retention.bytes").0.as_deref() == Some("-1")),
        "retention.bytes still {:?} {SETTLE:?} after the Delete",
        topic_config(admin, &topic, "retention.bytes")
    );
    assert_eq!(topic_config(admin, &topic, "retention.bytes").1, ConfigSource::Default);
    assert_eq!(topic_config(admin, &topic, "retention.ms"), (Some("3600000".to_string()), ConfigSource::DynamicTopic));

    // An invalid value: the broker's text names the key; nothing changes.
    let err = incremental_alter_topic_configs(client, &topic, &[set("retention.bytes", "lots")], TIMEOUT)
        .expect_err("`lots` is not a LONG");
    assert!(err.contains("retention.bytes") && err.contains("lots") && err.contains("(INVALID_CONFIG)"), "{err}");
    assert_eq!(topic_config(admin, &topic, "retention.bytes").0.as_deref(), Some("-1"));

    // A topic that does not exist: the error carries librdkafka's name of the error.
    let missing = unique("no-such-topic");
    let err = incremental_alter_topic_configs(client, &missing, &[set("retention.ms", "1000")], TIMEOUT)
        .expect_err("no such topic");
    assert!(err.contains("does not exist") && err.contains("(UNKNOWN_TOPIC_OR_PART)"), "{err}");
    // No ops: no request, so not even the missing topic is an error.
    assert_eq!(incremental_alter_topic_configs(client, &missing, &[], TIMEOUT), Ok(()));
}

fn acls_are_created_idempotently_and_described_exactly(admin: &AdminClient<DefaultClientContext>) {
    let client = admin.inner();
    // A fresh cluster has no ACLs, and an authorizer: empty is an answer, not an error.
    assert_eq!(describe_topic_acls(client, TIMEOUT), Ok(vec![]));

    let literal = alice_reads(unique("acl-literal"));
    let prefixed = TopicAcl {
        topic: "acl-prefix.".into(),
        prefixed: true,
        operation: AclOperation::Write,
        allow: false,
        ..literal.clone()
    };
    let mut want = vec![literal, prefixed];
    want.sort();

    create_topic_acls(client, &want, TIMEOUT).unwrap_or_else(|e| panic!("create: {e}"));
    let described = || {
        let mut got = describe_topic_acls(client, TIMEOUT).unwrap_or_else(|e| panic!("describe: {e}"));
        got.sort();
        got
    };
    assert!(
        wait_until(SETTLE, || described().len() >= want.len()),
        "described {:?} {SETTLE:?} after creating {want:?}",
        described()
    );
    assert_eq!(described(), want);

    // Creating them again changes nothing and is not an error.
    create_topic_acls(client, &want, TIMEOUT).unwrap_or_else(|e| panic!("create again: {e}"));
    assert_eq!(described(), want);
    assert_eq!(create_topic_acls(client, &[], TIMEOUT), Ok(()));
}

#[test]
fn a_cluster_without_an_authorizer_says_so() {
    let west = admin(&stand().west);
    assert_eq!(describe_topic_acls(west.inner(), TIMEOUT), Err(NO_AUTHORIZER.to_string()));
    let acl = alice_reads(unique("acl-none"));
    assert_eq!(create_topic_acls(west.inner(), &[acl], TIMEOUT), Err(NO_AUTHORIZER.to_string()));
    // No bindings: no request, so the missing authorizer is not an error.
    assert_eq!(create_topic_acls(west.inner(), &[], TIMEOUT), Ok(()));
}
