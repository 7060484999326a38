//! Schemas follow the records, on real clusters and real registries (Apicurio Registry's
//! Confluent-compatible API, and AxonOps Schema Registry where ids are kept through IMPORT mode;
//! `scripts/registry.sh`): records written by confluent-kafka's own Avro and Protobuf
//! serializers on the source are read on the target by its deserializer pointed at the target's
//! registry.

use std::time::Duration;

use crate::support::*;
use serde_json::Value;
use strait_core::config::RegistryAccess;
use strait_core::schemas::{Registry, Schema};

fn registry(alias: &str, url: &str) -> Registry {
    let access = RegistryAccess { url: url.to_string(), user_info: None, ca_location: None, line: 0 };
    Registry::new(alias, &access).expect("registry client")
}

/// (key, value) of each record a tool printed, in a stable order.
fn records(lines: &[Value]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = lines.iter().map(|l| (l["key"].to_string(), l["value"].to_string())).collect();
    out.sort();
    out
}

#[test]
fn avro_records_cross_with_their_schemas_and_read_back_through_the_target_registry() {
    let (s, r) = (stand(), registries());
    let topic = unique("avro-orders");
    create_topic(&s.east, &topic, 3, 3, &[]);
    let (east, west) = (registry("us-east", &r.east), registry("us-west", &r.west));
    // Schemas already on the target take its first ids, so ids that crossed unchanged would
    // name the wrong schemas there.
    shift_ids(&west);
    let mut sent = serdes(&["avro_tool", "produce", &s.east, &r.east, &topic, "1", "0", "30"]);
    east.set_compatibility(&format!("{topic}-value"), "BACKWARD").expect("source compatibility");

    // The file `examples/schema-registry` ships, its registries where the stand runs them.
    let config = example("schema-registry", &topic)
        .replace("http://127.0.0.1:18081/apis/ccompat/v7", &r.east)
        .replace("http://127.0.0.1:28081/apis/ccompat/v7", &r.west);
    let strait = Strait::start(&config);
    let remote = format!("us-east.{topic}");
    assert!(
        wait_until(Duration::from_secs(90), || record_count(&s.west, &remote) == 30),
        "log:\n{}",
        strait.log_text()
    );
    // The schema evolves mid-stream: version 2 adds a field with a default.
    sent.extend(serdes(&["avro_tool", "produce", &s.east, &r.east, &topic, "2", "30", "30"]));
    assert!(
        wait_until(Duration::from_secs(90), || record_count(&s.west, &remote) == 60),
        "log:\n{}",
        strait.log_text()
    );

    let read = serdes(&["avro_tool", "consume", &s.west, &r.west, &remote, "60"]);
    assert_eq!(records(&read), records(&sent), "every record deserializes on the target to what was produced");
    let subject = format!("{remote}-value");
    assert_eq!(west.versions(&subject).expect("versions"), vec![1, 2], "both versions, in order");
    assert_eq!(west.compatibility(&subject).expect("compatibility").as_deref(), Some("BACKWARD"));
    assert_eq!(west.versions(&format!("{remote}-key")).expect("key versions"), vec![1]);
    same_schemas_by_id(&east, &sent, &west, &read);

    // Restarted, strait finds the schemas on the target and registers nothing: the records it
    // replicates after the restart are the sentinel that it met their ids. At least once, what
    // the first process had not stored positions for may arrive twice.
    drop(strait);
    let strait = Strait::start(&config);
    sent.extend(serdes(&["avro_tool", "produce", &s.east, &r.east, &topic, "2", "60", "10"]));
    let mut read = Vec::new();
    assert!(
        wait_until(Duration::from_secs(90), || {
            let n = record_count(&s.west, &remote);
            if n < 70 {
                return false;
            }
            read = serdes(&["avro_tool", "consume", &s.west, &r.west, &remote, &n.to_string()]);
            let mut distinct = records(&read);
            distinct.dedup();
            distinct == records(&sent)
        }),
        "the target holds {} records; log:\n{}",
        read.len(),
        strait.log_text()
    );
    // Other tests' subjects may be copied meanwhile: only this topic's count.
    let again = format!("subject=\"{topic}-");
    assert!(
        !strait.log_text().lines().any(|l| l.contains("schema copied to the target registry") && l.contains(&again)),
        "a restart registered schemas again:\n{}",
        strait.log_text()
    );
}

/// A flow between the stand's clusters with schema sync between `source` and `target`
/// registries (plus `extra` lines).
fn schema_flow(topic: &str, source: &str, target: &str, extra: &str) -> String {
    east_to_west(
        topic,
        &format!("us-east.schema.registry.url = {source}\nus-west.schema.registry.url = {target}\nschema.sync.interval.seconds = 1\n{extra}"),
    )
}

#[test]
fn a_target_registry_down_at_start_holds_the_records_until_it_is_up_and_none_crosses_with_an_unknown_id() {
    let (s, r) = (stand(), registries());
    let topic = unique("avro-late");
    create_topic(&s.east, &topic, 3, 3, &[]);
    let sent = serdes(&["avro_tool", "produce", &s.east, &r.east, &topic, "1", "0", "20"]);
    // A port nothing listens on yet; the registry starts there later.
    let port = free_port();
    let late = format!("http://127.0.0.1:{port}/apis/ccompat/v7");
    let strait = Strait::start(&schema_flow(&topic, &r.east, &late, ""));
    let remote = format!("us-east.{topic}");
    assert!(
        wait_until(Duration::from_secs(60), || strait.log_text().contains("wait for it to reach the target")),
        "the flow does not say what it waits for:\n{}",
        strait.log_text()
    );
    assert!(strait.log_text().contains(&late), "the waiting line names the registry:\n{}", strait.log_text());
    assert_eq!(record_count(&s.west, &remote).max(0), 0, "a record crossed before its schema");

    let late = start_registry("late-west", port, None);
    let all_arrived = wait_until(Duration::from_secs(90), || record_count(&s.west, &remote) >= 20);
    let read = if all_arrived {
        serdes(&["avro_tool", "consume", &s.west, &late, &remote, &record_count(&s.west, &remote).to_string()])
    } else {
        Vec::new()
    };
    stop_registry("late-west");
    assert!(all_arrived, "log:\n{}", strait.log_text());
    let mut distinct = records(&read);
    distinct.dedup();
    assert_eq!(distinct, records(&sent), "every record deserializes with the registry that came up late");
}

#[test]
fn a_registry_that_refuses_the_credentials_stops_the_flow_with_one_line_naming_the_alias_and_key() {
    let (s, r) = (stand(), registries());
    let topic = unique("avro-auth");
    create_topic(&s.east, &topic, 3, 3, &[]);
    serdes(&["avro_tool", "produce", &s.east, &r.east, &topic, "1", "0", "5"]);
    let secured = start_registry("secured-west", 38181, Some("strait:right"));
    let auth = "us-west.schema.registry.basic.auth.credentials.source = USER_INFO\nus-west.schema.registry.basic.auth.user.info = strait:wrong";
    let strait = Strait::start(&schema_flow(&topic, &r.east, &secured, auth));
    let line = "refused strait's credentials (HTTP 401)";
    let refused = wait_until(Duration::from_secs(60), || strait.log_text().contains(line));
    let log = strait.log_text();
    assert!(refused, "log:\n{log}");
    let named = log.lines().find(|l| l.contains(line)).unwrap_or_default();
    assert!(named.contains("`us-west.schema.registry.basic.auth.user.info`"), "{named}");
    assert!(!log.contains("strait:wrong") && !log.contains("wrong"), "the password never shows:\n{log}");
    assert_eq!(record_count(&s.west, &format!("us-east.{topic}")).max(0), 0, "nothing crossed without its schema");
}

/// A record whose id the source registry does not know (a corrupted id), and one not in the
/// wire format: both pass unchanged and are counted; with `schema.strict` the first stops the
/// flow before it, while the plain record before it had arrived.
#[test]
fn an_unknown_schema_id_passes_unchanged_or_stops_the_flow_when_strict_and_plain_bytes_pass_untouched() {
    let (s, r) = (stand(), registries());
    for strict in [false, true] {
        let topic = unique("corrupt");
        create_topic(&s.east, &topic, 3, 3, &[]);
        produce(&s.east, &topic, &[TestRecord::kv(0, "plain-key", "plain value")], &[]);
        let strait = Strait::start(&schema_flow(&topic, &r.east, &r.west, &format!("schema.strict = {strict}")));
        let remote = format!("us-east.{topic}");
        assert!(
            wait_until(Duration::from_secs(60), || record_count(&s.west, &remote) == 1),
            "log:\n{}",
            strait.log_text()
        );
        let corrupt: Vec<u8> = [&[0u8, 0x7f, 0xff, 0xff, 0xf0][..], b"avro bytes"].concat();
        let mut bad = TestRecord::kv(0, "corrupt", "");
        bad.value = Some(corrupt.clone());
        produce(&s.east, &topic, &[bad, TestRecord::kv(0, "after", "after")], &[]);
        if strict {
            let stopped = "schema.strict = true refuses it";
            assert!(
                wait_until(Duration::from_secs(60), || strait.log_text().contains(stopped)),
                "log:\n{}",
                strait.log_text()
            );
            // The flow stops before the batch that holds the record: the target's log end is
            // still past the plain record only.
            assert_eq!(record_count(&s.west, &remote), 1, "a record past the refused one crossed");
        } else {
            let got = read_all(&s.west, &remote, 3, Duration::from_secs(60));
            let values: Vec<Option<Vec<u8>>> = got.concat().into_iter().map(|r| r.value).collect();
            assert_eq!(
                values,
                vec![Some(b"plain value".to_vec()), Some(corrupt.clone()), Some(b"after".to_vec())],
                "unchanged, in order"
            );
            let counted = wait_until(Duration::from_secs(20), || {
                strait.metric("strait_schema_records_total", &[("outcome", "unknown_id")]) == Some(1.0)
                    && strait.metric("strait_schema_records_total", &[("outcome", "plain")]) == Some(5.0)
            });
            assert!(counted, "{}", strait.metrics());
        }
    }
}

/// Each record read on the target carries ids that name, in the target's registry, the schemas
/// its ids on the source name in the source's (records matched by key).
fn same_schemas_by_id(east: &Registry, sent: &[Value], west: &Registry, read: &[Value]) {
    let on_source: std::collections::HashMap<String, &Value> = sent.iter().map(|l| (l["key"].to_string(), l)).collect();
    for l in read {
        let sent = on_source[&l["key"].to_string()];
        for field in ["key_id", "value_id"] {
            let id = |line: &Value| line[field].as_u64().and_then(|id| u32::try_from(id).ok()).expect("an id");
            let (source_id, target_id) = (id(sent), id(l));
            let (a, b) = (east.schema(source_id).expect("source"), west.schema(target_id).expect("target"));
            assert!(a.is_some(), "{field} {source_id} is not on the source");
            assert_eq!(a.map(|s| s.schema), b.map(|s| s.schema), "{field} {source_id} on the source -> {target_id}");
        }
    }
}

/// Schemas on the target take ids the source's registry gave to other schemas.
fn shift_ids(target: &Registry) {
    for i in 0..3 {
        let junk = Schema {
            schema: format!(r#"{{"type":"record","name":"Shift{i}","fields":[{{"name":"f","type":"int"}}]}}"#),
            schema_type: None,
            references: Vec::new(),
        };
        target.register(&unique("shift-value"), &junk).expect("a schema on the target");
    }
}

#[test]
fn protobuf_records_with_a_reference_cross_exactly_once_and_a_failed_over_group_reads_on_from_its_translated_position()
{
    let (s, r) = (stand(), registries());
    let topic = unique("proto-orders");
    create_topic(&s.east, &topic, 3, 3, &[]);
    let (east, west) = (registry("us-east", &r.east), registry("us-west", &r.west));
    shift_ids(&west);
    // The value's schema imports `strait/money.proto`: a reference, registered as its own subject.
    let sent = serdes(&["protobuf_tool", "produce", &s.east, &r.east, &topic, "0", "60"]);
    let group = unique("proto-cg");
    let config =
        schema_flow(&topic, &r.east, &r.west, &format!("groups = {group}\nexactly.once.source.support = enabled"));
    let strait = Strait::start(&config);
    let remote = format!("us-east.{topic}");
    assert!(
        wait_until(Duration::from_secs(90), || crate::support::groups::count_readable(&s.west, &remote, 3) == 60),
        "log:\n{}",
        strait.log_text()
    );

    // The group reads 35 on us-east, fails over, and reads the other 25 on us-west.
    let east_read = serdes(&["protobuf_tool", "consume-group", &s.east, &r.east, &topic, &group, "earliest", "35"]);
    let committed = crate::support::groups::committed_offsets(&s.east, &group, &topic, 3);
    crate::support::groups::wait_for_group_sync(&s.west, &group, &remote, &committed, &strait);
    let west_read = serdes(&["protobuf_tool", "consume-group", &s.west, &r.west, &remote, &group, "earliest", "25"]);
    let both: Vec<Value> = east_read.iter().chain(&west_read).cloned().collect();
    assert_eq!(records(&both), records(&sent), "each record read once, on one side or the other, as produced");

    // Message indexes and data were left as they were, or the reads above would have failed.
    same_schemas_by_id(&east, &sent, &west, &west_read);
    let value = west.version(&format!("{remote}-value"), 1).expect("read").expect("the value subject is on the target");
    assert_eq!(value.schema.references.len(), 1, "{value:?}");
    let reference = &value.schema.references[0];
    assert_eq!((reference.name.as_str(), reference.subject.as_str()), ("strait/money.proto", "strait/money.proto"));
    assert!(west.version(&reference.subject, reference.version).expect("read").is_some(), "the reference came first");
}

#[test]
fn a_new_version_registered_on_the_source_reaches_the_target_within_the_sync_interval_without_a_record() {
    let (s, r) = (stand(), registries());
    let topic = unique("avro-evolve");
    create_topic(&s.east, &topic, 3, 3, &[]);
    serdes(&["avro_tool", "produce", &s.east, &r.east, &topic, "1", "0", "3"]);
    let strait = Strait::start(&schema_flow(&topic, &r.east, &r.west, ""));
    let (east, west) = (registry("us-east", &r.east), registry("us-west", &r.west));
    let subject = format!("{topic}-value");
    let remote_subject = format!("us-east.{topic}-value");
    assert!(
        wait_until(Duration::from_secs(60), || west.versions(&remote_subject).ok().map(|v| v.len()) == Some(1)),
        "log:\n{}",
        strait.log_text()
    );
    let v2 = Schema {
        schema: r#"{"type":"record","name":"Order","namespace":"strait.test","fields":[{"name":"id","type":"string"},{"name":"amount","type":"long"},{"name":"later","type":"int","default":0}]}"#.into(),
        schema_type: None,
        references: Vec::new(),
    };
    east.register(&subject, &v2).expect("version 2 on the source");
    let registered = std::time::Instant::now();
    // The interval is 1 s; a round may take a few requests more.
    assert!(
        wait_until(Duration::from_secs(10), || west.versions(&remote_subject).ok().map(|v| v.len()) == Some(2)),
        "log:\n{}",
        strait.log_text()
    );
    eprintln!("version 2 reached the target {:?} after it was registered", registered.elapsed());
}

/// `schema.ids = keep` needs a target registry that keeps the ids of Confluent's IMPORT mode.
/// Apicurio's Confluent API assigns its own (its register request has no id), so strait stops
/// the flow with one line saying so, and no record crosses with an id that names another schema
/// there.
#[test]
fn keep_on_a_registry_that_assigns_its_own_ids_stops_the_flow_with_one_line_and_nothing_crosses() {
    let (s, r) = (stand(), registries());
    let topic = unique("avro-keep");
    create_topic(&s.east, &topic, 3, 3, &[]);
    let west = registry("us-west", &r.west);
    // Schemas of their own, which the target has never seen under any id.
    let namespace = unique("keep").replace('-', "_");
    let sent = serdes(&["avro_tool", "produce", &s.east, &r.east, &topic, "1", "0", "5", &namespace]);
    let ids: Vec<u64> = ["key_id", "value_id"].iter().filter_map(|f| sent[0][*f].as_u64()).collect();
    // The target's next ids must differ from the source's, or it would keep them by chance.
    loop {
        let junk = Schema {
            schema: format!(r#"{{"type":"record","name":"{}","fields":[]}}"#, unique("Keep").replace('-', "_")),
            schema_type: None,
            references: Vec::new(),
        };
        let last = u64::from(west.register(&unique("keep-shift-value"), &junk).expect("a schema on the target"));
        if !ids.iter().any(|id| (last + 1..=last + 4).contains(id)) {
            break;
        }
    }
    let strait = Strait::start(&schema_flow(&topic, &r.east, &r.west, "schema.ids = keep"));
    // The flow stops before the first record that carries such an id.
    let said_of = |log: &str| {
        log.lines()
            .find(|l| l.contains("carries schema id") && l.contains("did not keep the source's id"))
            .map(str::to_string)
    };
    assert!(
        wait_until(Duration::from_secs(60), || said_of(&strait.log_text()).is_some()),
        "log:\n{}",
        strait.log_text()
    );
    let said = said_of(&strait.log_text()).unwrap_or_default();
    assert!(said.contains("schema.ids = translate"), "the line names the fix: {said}");
    eprintln!("{said}");
    assert_eq!(record_count(&s.west, &format!("us-east.{topic}")).max(0), 0, "a record crossed with a foreign id");
}

/// `schema.ids = keep` on a registry that honours Confluent's IMPORT mode (AxonOps Schema
/// Registry, `registry.sh start --import`): every version lands under the source's id and
/// version, records cross with the ids they were written with, and the target's deserializer
/// reads them through its own registry.
#[test]
fn keep_imports_every_version_under_the_source_id_and_the_records_cross_with_their_ids_unchanged() {
    let (s, r) = (stand(), registries());
    let topic = unique("avro-kept");
    create_topic(&s.east, &topic, 3, 3, &[]);
    let url = start_import_registry("import-west", free_port());
    let (east, west) = (registry("us-east", &r.east), registry("us-west", &url));
    let mut sent = serdes(&["avro_tool", "produce", &s.east, &r.east, &topic, "1", "0", "20"]);
    let subject = format!("{topic}-value");
    east.set_compatibility(&subject, "BACKWARD").expect("source compatibility");
    let config = schema_flow(&topic, &r.east, &url, "schema.ids = keep");
    let strait = Strait::start(&config);
    let remote = format!("us-east.{topic}");
    // The schema evolves mid-stream: version 2 adds a field with a default.
    sent.extend(serdes(&["avro_tool", "produce", &s.east, &r.east, &topic, "2", "20", "20"]));
    assert!(
        wait_until(Duration::from_secs(90), || record_count(&s.west, &remote) == 40),
        "log:\n{}",
        strait.log_text()
    );

    let read = serdes(&["avro_tool", "consume", &s.west, &url, &remote, "40"]);
    assert_eq!(records(&read), records(&sent), "every record deserializes on the target to what was produced");
    let ids = |lines: &[Value]| -> Vec<(String, String, String)> {
        let mut ids: Vec<_> =
            lines.iter().map(|l| (l["key"].to_string(), l["key_id"].to_string(), l["value_id"].to_string())).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&read), ids(&sent), "each record carries on the target the ids it was written with");
    for (source_subject, target_subject) in
        [(subject.clone(), format!("{remote}-value")), (format!("{topic}-key"), format!("{remote}-key"))]
    {
        let versions = east.versions(&source_subject).expect("source versions");
        assert_eq!(west.versions(&target_subject).expect("target versions"), versions, "{target_subject}");
        for v in versions {
            let (a, b) =
                (east.version(&source_subject, v).expect("read"), west.version(&target_subject, v).expect("read"));
            let (a, b) = (a.expect("on the source"), b.expect("on the target"));
            assert_eq!((b.id, b.schema.schema), (a.id, a.schema.schema), "{target_subject} version {v}");
        }
    }
    assert_eq!(west.compatibility(&format!("{remote}-value")).expect("compatibility").as_deref(), Some("BACKWARD"));

    // Restarted, strait finds every version on the target and imports nothing again; the
    // records it replicates after the restart are the sentinel that it met their ids.
    drop(strait);
    let strait = Strait::start(&config);
    sent.extend(serdes(&["avro_tool", "produce", &s.east, &r.east, &topic, "2", "40", "5"]));
    let arrived = wait_until(Duration::from_secs(90), || record_count(&s.west, &remote) >= 45);
    let log = strait.log_text();
    stop_registry("import-west");
    assert!(arrived, "log:\n{log}");
    let again = format!("subject=\"{topic}-");
    assert!(
        !log.lines().any(|l| l.contains("schema copied to the target registry") && l.contains(&again)),
        "a restart imported schemas again:\n{log}"
    );
}

#[test]
fn a_registry_over_tls_is_trusted_through_its_ca_file_and_refused_without_it() {
    let (s, r) = (stand(), registries());
    let topic = unique("avro-tls");
    create_topic(&s.east, &topic, 3, 3, &[]);
    serdes(&["avro_tool", "produce", &s.east, &r.east, &topic, "1", "0", "5"]);
    let (url, ca) = start_tls_registry("tls-west", free_port());
    let remote = format!("us-east.{topic}");

    // Without the CA file the system's roots do not know its certificate: the records wait and
    // the flow says which registry it cannot reach.
    let strait = Strait::start(&schema_flow(&topic, &r.east, &url, ""));
    let waiting = wait_until(Duration::from_secs(60), || {
        strait.log_text().lines().any(|l| l.contains("cannot be reached") && l.contains(&url))
    });
    assert!(waiting, "log:\n{}", strait.log_text());
    assert_eq!(record_count(&s.west, &remote).max(0), 0, "a record crossed without its schema");
    drop(strait);

    let strait = Strait::start(&schema_flow(
        &topic,
        &r.east,
        &url,
        &format!("us-west.schema.registry.ssl.ca.location = {}", ca.display()),
    ));
    let arrived = wait_until(Duration::from_secs(90), || record_count(&s.west, &remote) >= 5);
    let access = RegistryAccess { url: url.clone(), user_info: None, ca_location: Some(ca), line: 0 };
    let versions = Registry::new("us-west", &access).expect("client").versions(&format!("{remote}-value"));
    stop_registry("tls-west");
    assert!(arrived, "log:\n{}", strait.log_text());
    assert_eq!(versions.expect("read over TLS"), vec![1]);
}

/// A schema of its own: a record named `name` with `fields`.
fn record_schema(name: &str, fields: &str) -> Schema {
    Schema {
        schema: format!(r#"{{"type":"record","name":"{name}","fields":[{fields}]}}"#),
        schema_type: None,
        references: Vec::new(),
    }
}

/// On registries of its own (the stand's are shared by every test's flows, which copy every
/// RecordNameStrategy subject they meet): which subjects a flow copies, and under which names.
#[test]
fn subjects_follow_the_name_strategies_the_subject_filter_and_schema_versions_latest() {
    let s = stand();
    let topic = unique("subjects");
    create_topic(&s.east, &topic, 3, 3, &[]);
    let (east_url, west_url) =
        (start_import_registry("subjects-east", free_port()), start_import_registry("subjects-west", free_port()));
    let (east, west) = (registry("us-east", &east_url), registry("us-west", &west_url));
    let f = r#"{"name":"a","type":"int"}"#;
    let f2 = r#"{"name":"a","type":"int"},{"name":"b","type":"int","default":0}"#;
    // TopicNameStrategy with two versions, TopicRecordNameStrategy, and two RecordNameStrategy
    // subjects of which the filter leaves one out.
    east.register(&format!("{topic}-value"), &record_schema("Rec", f)).expect("v1");
    east.register(&format!("{topic}-value"), &record_schema("Rec", f2)).expect("v2");
    let topic_record = format!("{topic}-com.acme.Rec");
    east.register(&topic_record, &record_schema("RecTR", f)).expect("topic-record");
    let (kept, left_out) = ("com.acme.Kept", "com.acme.LeftOut");
    east.register(kept, &record_schema("Kept", f)).expect("kept");
    east.register(left_out, &record_schema("LeftOut", f)).expect("left out");

    let extra = "schema.versions = latest\nschema.subjects.exclude = com\\.acme\\.LeftOut";
    let strait = Strait::start(&schema_flow(&topic, &east_url, &west_url, extra));
    let remote_value = format!("us-east.{topic}-value");
    let on_target = |subject: &str| west.versions(subject).ok().filter(|v| !v.is_empty());
    let first = wait_until(Duration::from_secs(60), || {
        on_target(&remote_value).is_some()
            && on_target(&format!("us-east.{topic_record}")).is_some()
            && on_target(kept).is_some()
    });
    // A subject registered after the others is copied in a later round, one that also met the
    // subject the filter leaves out: the sentinel.
    east.register("com.acme.Later", &record_schema("Later", f)).expect("later");
    let later = first && wait_until(Duration::from_secs(60), || on_target("com.acme.Later").is_some());
    let (value, latest) = (on_target(&remote_value), west.version(&remote_value, 1));
    let (excluded, excluded_renamed) = (on_target(left_out), on_target(&format!("us-east.{left_out}")));
    stop_registry("subjects-east");
    stop_registry("subjects-west");
    assert!(first && later, "log:\n{}", strait.log_text());
    assert_eq!(value, Some(vec![1]), "only the latest version");
    let copied = latest.expect("read").expect("there");
    assert_eq!(copied.schema.schema, record_schema("Rec", f2).schema, "the latest is version 2 of the source");
    assert_eq!(excluded, None, "schema.subjects.exclude left it out");
    assert_eq!(excluded_renamed, None);
}
