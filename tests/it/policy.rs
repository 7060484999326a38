//! Policy components on the data path: a user's record hook, and containment of bad plugins.

use std::time::Duration;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(90);

#[test]
fn a_user_component_drops_flagged_records_and_masks_a_json_field() {
    drops_flagged_records_and_masks_a_json_field(&plugin("header-filter"));
}

#[test]
fn the_header_filter_written_in_python_does_what_the_rust_one_does() {
    drops_flagged_records_and_masks_a_json_field(&polyglot("python", "header-filter"));
}

#[test]
fn the_header_filter_written_in_javascript_does_what_the_rust_one_does() {
    drops_flagged_records_and_masks_a_json_field(&polyglot("js", "header-filter"));
}

/// `component` (the header-filter policy in any language) drops the records flagged with
/// `x-strait-drop` and masks the `card` field of the others.
fn drops_flagged_records_and_masks_a_json_field(component: &std::path::Path) {
    let s = stand();
    let topic = unique("payments");
    create_topic(&s.east, &topic, 1, 1, &[]);
    let mut sent = Vec::new();
    for i in 0..20 {
        let mut r = TestRecord::kv(0, &format!("p{i}"), &format!(r#"{{"id":{i},"card":"4111-{i:04}","amount":{i}}}"#));
        if i % 4 == 0 {
            r.headers.push(("x-strait-drop".into(), Some(b"yes".to_vec())));
        }
        sent.push(r);
    }
    produce(&s.east, &topic, &sent, &[]);
    let config = east_to_west(
        &topic,
        &format!(
            "replication.policy.wasm = {}\nreplication.policy.header-filter.mask.field = card\n",
            component.display()
        ),
    );
    let strait = Strait::start(&config);
    let remote = format!("us-east.{topic}");
    let mut got = read_all(&s.west, &remote, 15, WAIT);
    strip_timestamps(&mut got);
    let expected: Vec<TestRecord> = sent
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 4 != 0)
        .map(|(i, r)| TestRecord {
            value: Some(format!(r#"{{"id":{i},"card":"***","amount":{i}}}"#).into_bytes()),
            ..r.clone()
        })
        .collect();
    assert_eq!(got, vec![expected], "log:\n{}", strait.log_text());
    // A sentinel produced after them: once it arrived, a dropped record that was coming would
    // have arrived before it (one partition, order kept).
    produce(&s.east, &topic, &[TestRecord::kv(0, "sentinel", r#"{"card":"4111-9999"}"#)], &[]);
    let got = read_all(&s.west, &remote, 16, WAIT);
    assert_eq!(got[0].len(), 16, "the sentinel arrived; log:\n{}", strait.log_text());
    assert_eq!(got[0][15].key.as_deref(), Some(&b"sentinel"[..]), "the dropped records never arrive");
    assert_eq!(record_count(&s.west, &remote), 16, "the dropped records never arrive");
    let dropped = strait.metric("strait_records_dropped_total", &[("flow", "us-east->us-west"), ("reason", "policy")]);
    assert_eq!(dropped, Some(5.0), "the hook's drops are counted with their reason:\n{}", strait.metrics());
}

#[test]
fn a_hook_that_traps_loops_hoards_memory_or_errors_stops_the_flow_before_its_batch() {
    let s = stand();
    let misbehave = plugin("misbehave");
    for (mode, cause) in [
        ("trap", "trapped"),
        ("loop", "ran longer than"),
        ("alloc", "memory past the 64 MiB limit"),
        ("error", "refusing a batch of"),
    ] {
        let topic = unique(&format!("misbehave-{mode}"));
        create_topic(&s.east, &topic, 1, 1, &[]);
        let sent: Vec<TestRecord> = (0..5).map(|i| TestRecord::kv(0, "k", &i.to_string())).collect();
        produce(&s.east, &topic, &sent, &[]);
        let extra =
            format!("replication.policy.wasm = {}\nreplication.policy.misbehave.mode = {mode}\n", misbehave.display());
        let mut bad = Strait::start(&east_to_west(&topic, &extra));
        let status =
            bad.wait_exit(WAIT).unwrap_or_else(|| panic!("mode {mode}: strait kept running; log:\n{}", bad.log_text()));
        let log = bad.log_text();
        let last = log.lines().last().unwrap_or_default();
        assert!(!status.success(), "mode {mode}: {log}");
        assert!(
            last.contains(&misbehave.display().to_string())
                && last.contains("records.on-batch")
                && last.contains(cause),
            "mode {mode}: the error must name the plugin, the hook and `{cause}`:\n{log}"
        );
        let remote = format!("us-east.{topic}");
        assert_eq!(record_count(&s.west, &remote), 0, "mode {mode}: nothing of the failed batch reached the target");

        if mode == "trap" {
            // No position passed the batch: the same flow without the plugin replicates all of it once.
            let good = Strait::start(&east_to_west(&topic, ""));
            let mut got = read_all(&s.west, &remote, 5, WAIT);
            strip_timestamps(&mut got);
            assert_eq!(got, vec![sent.clone()], "log:\n{}", good.log_text());
        }
    }
}

#[test]
fn a_plugin_that_refuses_its_config_or_does_not_fit_the_contract_stops_strait_with_one_clear_line() {
    let s = stand();
    let topic = unique("refused");
    create_topic(&s.east, &topic, 1, 1, &[]);
    let extra = format!(
        "replication.policy.wasm = {}\nreplication.policy.misbehave.mode = refuse\n",
        plugin("misbehave").display()
    );
    let mut refused = Strait::start(&east_to_west(&topic, &extra));
    assert!(!refused.wait_exit(WAIT).expect("exits").success());
    let log = refused.log_text();
    assert!(
        log.lines()
            .last()
            .unwrap_or_default()
            .contains("refused the flow's configuration: this flow is refused on purpose"),
        "{log}"
    );

    for (plugin_name, expected) in
        [("old-contract", "strait:policy/lifecycle@0.0.9"), ("partial", "does not implement strait:policy@0.1.0")]
    {
        let path = plugin(plugin_name);
        let mut wrong =
            Strait::start(&east_to_west(&topic, &format!("replication.policy.wasm = {}\n", path.display())));
        assert!(!wrong.wait_exit(WAIT).expect("exits").success());
        let log = wrong.log_text();
        let last = log.lines().last().unwrap_or_default();
        assert!(last.contains(&path.display().to_string()) && last.contains(expected), "{plugin_name}: {log}");
    }

    let junk = std::env::temp_dir().join(format!("{}.wasm", unique("junk")));
    std::fs::write(&junk, b"\0asm\x01\0\0\0").unwrap();
    let mut broken = Strait::start(&east_to_west(&topic, &format!("replication.policy.wasm = {}\n", junk.display())));
    assert!(!broken.wait_exit(WAIT).expect("exits").success());
    let log = broken.log_text();
    let last = log.lines().last().unwrap_or_default();
    assert!(last.contains(&junk.display().to_string()) && last.contains("not a WebAssembly component"), "{log}");
}

#[test]
fn replacing_the_wasm_file_or_sighup_swaps_the_policy_between_batches_without_loss_or_duplicates() {
    let s = stand();
    let topic = unique("reload");
    create_topic(&s.east, &topic, 1, 1, &[]);
    let live = std::env::temp_dir().join(format!("{}.wasm", unique("live-policy")));
    std::fs::copy(plugin("header-filter"), &live).unwrap();
    let config = east_to_west(
        &topic,
        &format!("replication.policy.wasm = {}\nreplication.policy.header-filter.mask.field = card\n", live.display()),
    );
    let strait = Strait::start(&config);
    let remote = format!("us-east.{topic}");
    let batch = |tag: &str| -> Vec<TestRecord> {
        (0..10).map(|i| TestRecord::kv(0, tag, &format!(r#"{{"card":"{tag}-{i}"}}"#))).collect()
    };

    produce(&s.east, &topic, &batch("before"), &[]);
    assert!(wait_until(WAIT, || record_count(&s.west, &remote) == 10), "log:\n{}", strait.log_text());

    // An operator's deploy: write the new component next to the old one, then rename over it.
    let staged = live.with_extension("staged");
    std::fs::copy(plugin("misbehave"), &staged).unwrap(); // without a mode it forwards everything unchanged
    std::fs::rename(&staged, &live).unwrap();
    // The hook looks at the file between batches, so the next batch already meets the new policy.
    produce(&s.east, &topic, &batch("after"), &[]);
    assert!(wait_until(WAIT, || record_count(&s.west, &remote) >= 20), "log:\n{}", strait.log_text());
    let values = |n: usize| -> Vec<String> {
        read_all(&s.west, &remote, n, WAIT)[0]
            .iter()
            .map(|r| String::from_utf8(r.value.clone().unwrap_or_default()).unwrap_or_default())
            .collect()
    };
    let first = values(20);
    assert!(first[..10].iter().all(|v| v == r#"{"card":"***"}"#), "{first:?}");
    assert_eq!(first[10..].to_vec(), (0..10).map(|i| format!(r#"{{"card":"after-{i}"}}"#)).collect::<Vec<_>>());
    assert_eq!(strait.log_text().matches("policy reloaded").count(), 1, "log:\n{}", strait.log_text());

    let status = std::process::Command::new("kill").args(["-HUP", &strait.child.id().to_string()]).status().unwrap();
    assert!(status.success());
    produce(&s.east, &topic, &batch("hup"), &[]);
    assert!(
        wait_until(Duration::from_secs(30), || strait.log_text().matches("policy reloaded").count() == 2),
        "SIGHUP reloads before the next batch; log:\n{}",
        strait.log_text()
    );
    assert!(wait_until(WAIT, || record_count(&s.west, &remote) >= 30), "log:\n{}", strait.log_text());
    // The last batch is the sentinel: a duplicate of the first two would have landed before it.
    let all = values(30);
    assert_eq!(record_count(&s.west, &remote), 30, "no duplicate: {all:?}");
    assert_eq!(all[..20], first[..]);
    assert_eq!(all[20..].to_vec(), (0..10).map(|i| format!(r#"{{"card":"hup-{i}"}}"#)).collect::<Vec<_>>());
}

#[test]
fn a_record_hook_that_routes_to_an_internal_topic_is_refused_and_nothing_is_written_there() {
    let s = stand();
    let misbehave = plugin("misbehave");
    let positions = test_positions_topic("us-east");
    for internal in
        [positions.as_str(), "__consumer_offsets", "heartbeats", "us-east.heartbeats", "us-east.checkpoints.internal"]
    {
        let topic = unique("route-internal");
        create_topic(&s.east, &topic, 1, 1, &[]);
        produce(&s.east, &topic, &(0..5).map(|i| TestRecord::kv(0, "k", &i.to_string())).collect::<Vec<_>>(), &[]);
        let extra = format!(
            "replication.policy.wasm = {}\nreplication.policy.misbehave.mode = route:{internal}\n",
            misbehave.display()
        );
        let mut bad = Strait::start(&east_to_west(&topic, &extra));
        let status = bad
            .wait_exit(WAIT)
            .unwrap_or_else(|| panic!("routing to {internal}: strait kept running; log:\n{}", bad.log_text()));
        let log = bad.log_text();
        let last = log.lines().last().unwrap_or_default();
        assert!(!status.success(), "{log}");
        assert!(
            last.contains("records.on-batch") && last.contains(&format!("`{internal}`, an internal topic")),
            "routing to {internal}: the error must name the hook and the topic:\n{log}"
        );
        assert_eq!(record_count(&s.west, &format!("us-east.{topic}")), 0, "nothing of the batch was written anywhere");
        if internal == positions {
            // The position topic holds strait's own records only: none of them passes the batch.
            let stored = stored_positions(&s.west, &topic);
            assert!(
                stored.values().flatten().all(|next| next.is_none_or(|n| n == 0)),
                "a position passed the refused batch: {stored:?}"
            );
        }
    }
}

#[test]
fn a_filter_component_keeps_topics_and_groups_by_naming_convention_and_drops_one_config_key() {
    use crate::support::groups::{committed_offsets, read_checkpoints, wait_for_group_sync};
    let s = stand();
    let (shared, private, late) = (
        format!("shared.{}", unique("orders")),
        format!("private.{}", unique("orders")),
        format!("shared.{}", unique("late")),
    );
    for topic in [&shared, &private] {
        create_topic(&s.east, topic, 1, 1, &[("retention.ms", "123456789"), ("max.message.bytes", "2000000")]);
        produce(&s.east, topic, &(0..10).map(|i| TestRecord::kv(0, "k", &i.to_string())).collect::<Vec<_>>(), &[]);
    }
    let (shared_cg, private_cg) = (format!("shared.{}", unique("cg")), format!("private.{}", unique("cg")));
    commit(&s.east, &private_cg, &shared, 5);
    commit(&s.east, &shared_cg, &shared, 5);
    let extra = format!(
        "us-east->us-west.topics = {shared}, {private}, {late}\ngroups = {shared_cg}, {private_cg}\nreplication.policy.wasm = {}\nsync.topic.configs.interval.seconds = 1\n",
        plugin("naming-convention").display()
    );
    let strait = Strait::start(&east_to_west(&shared, &extra));
    let remote = format!("us-east.{shared}");
    assert!(wait_until(WAIT, || record_count(&s.west, &remote) == 10), "log:\n{}", strait.log_text());
    assert_eq!(wait_for_group_sync(&s.west, &shared_cg, &remote, &[5], &strait), vec![5], "a 1:1 copy resumes at 5");

    // Sentinels: a topic created later is discovered in a later round, and a later commit is
    // checkpointed in a later round; the refused names had every chance by then.
    create_topic(&s.east, &late, 1, 1, &[]);
    assert!(
        wait_until(WAIT, || partition_count(&s.west, &format!("us-east.{late}")) == Some(1)),
        "log:\n{}",
        strait.log_text()
    );
    commit(&s.east, &shared_cg, &shared, 8);
    assert_eq!(wait_for_group_sync(&s.west, &shared_cg, &remote, &[8], &strait), vec![8], "a 1:1 copy resumes at 8");
    assert_eq!(partition_count(&s.west, &format!("us-east.{private}")), None, "filters.topic refused {private}");
    assert!(
        read_checkpoints(&s.west, "us-east.checkpoints.internal", &private_cg).is_empty(),
        "filters.group refused {private_cg}"
    );
    assert_eq!(committed_offsets(&s.west, &private_cg, &remote, 1), vec![-1]);

    let own = topic_level_configs(&s.west, &remote);
    assert_eq!(own.get("max.message.bytes").map(String::as_str), Some("2000000"), "{own:?}");
    assert!(!own.contains_key("retention.ms"), "filters.topic-config dropped retention.ms: {own:?}");

    // `strait validate` shows the same decisions, each with the filter that made it.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_strait"))
        .args(["validate", "--config"])
        .arg(strait.config_path())
        .output()
        .expect("run strait");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}{}", String::from_utf8_lossy(&out.stderr));
    let line =
        |starts: &str| shown.lines().find(|l| l.trim_start().starts_with(starts)).unwrap_or_default().to_string();
    let topics_kept = line("topics kept");
    assert!(topics_kept.contains(&shared) && topics_kept.contains(&late) && !topics_kept.contains(&private), "{shown}");
    assert!(shown.contains(&format!("left out: {private} (filters.topic)")), "{shown}");
    let groups_kept = line("groups kept");
    assert!(groups_kept.contains(&shared_cg) && !groups_kept.contains(&private_cg), "{shown}");
    assert!(shown.contains(&format!("left out: {private_cg} (filters.group)")), "{shown}");
    let keys_kept = line("topic config keys kept");
    let keys_kept: Vec<&str> =
        keys_kept.split_once(": ").map(|(_, list)| list.split(", ").collect()).unwrap_or_default();
    assert!(keys_kept.contains(&"max.message.bytes") && !keys_kept.contains(&"retention.ms"), "{shown}");
    assert!(shown.contains("left out: retention.ms (filters.topic-config)"), "{shown}");
    assert!(
        shown.contains("left out by config.properties.exclude"),
        "MM2's default exclusions (min.insync.replicas, ...) are counted:\n{shown}"
    );
}

#[test]
fn filter_answers_are_cached_per_name_until_the_component_is_reloaded() {
    use strait_core::policy::{PolicyEngine, WasmFilters};
    // A copy of the component of its own, so touching it reloads nothing else.
    let dir = std::env::temp_dir().join("strait-tests");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("{}.wasm", unique("naming-convention")));
    let bytes = std::fs::read(plugin("naming-convention")).expect("component");
    std::fs::write(&path, &bytes).expect("copy");
    let config = format!(
        "clusters = a, b\na.bootstrap.servers = h:1\nb.bootstrap.servers = h:2\na->b.enabled = true\nreplication.policy.wasm = {}\n",
        path.display()
    );
    let flow = strait_core::config::Config::parse(&config).expect("config").flows.remove(0);
    let component = PolicyEngine::shared().expect("engine").load_file(&path).expect("component");
    let filters = WasmFilters::new(component, &flow).expect("filters");

    assert_eq!((filters.topic("shared.a").unwrap(), filters.topic("private.a").unwrap()), (true, false));
    assert_eq!((filters.group("shared.cg").unwrap(), filters.topic_config("retention.ms").unwrap()), (true, false));
    assert_eq!(filters.asked(), 4);
    for _ in 0..3 {
        assert_eq!((filters.topic("shared.a").unwrap(), filters.topic("private.a").unwrap()), (true, false));
        assert_eq!((filters.group("shared.cg").unwrap(), filters.topic_config("retention.ms").unwrap()), (true, false));
    }
    assert_eq!(filters.asked(), 4, "answers for names already asked come from the cache");
    assert!(filters.topic("shared.b").unwrap());
    assert_eq!(filters.asked(), 5, "a new name reaches the component");

    // A rewritten file is a new component: its answers are asked again. The pause puts the
    // rewrite's modification time past the first write's on a coarse-grained filesystem clock.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&path, &bytes).expect("rewrite");
    let asked = filters.asked();
    let reloaded = wait_until(Duration::from_secs(10), || {
        assert!(filters.topic("shared.a").unwrap());
        filters.asked() > asked
    });
    assert!(reloaded, "the cached answer for shared.a outlived the reload");
    assert!(!filters.topic("private.a").unwrap());
    assert_eq!(filters.asked(), asked + 2, "after the reload, each name is asked once again and then cached");
    assert!(!filters.topic("private.a").unwrap());
    assert_eq!(filters.asked(), asked + 2);
}

/// Commits `offset` on partition 0 of `topic` for `group` (which has no members).
fn commit(bootstrap: &str, group: &str, topic: &str, offset: i64) {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    let c: BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Offset(offset)).expect("tpl");
    c.commit(&tpl, CommitMode::Sync).expect("commit");
}

#[test]
fn mm2_naming_as_a_rust_component_names_topics_and_checkpoints_with_its_separator() {
    names_like_mm2_with_its_separator(&plugin("default"));
}

#[test]
fn mm2_naming_written_in_python_names_what_the_rust_one_names() {
    names_like_mm2_with_its_separator(&polyglot("python", "mm2-naming"));
}

#[test]
fn mm2_naming_written_in_javascript_names_what_the_rust_one_names() {
    names_like_mm2_with_its_separator(&polyglot("js", "mm2-naming"));
}

/// `component` (MM2's DefaultReplicationPolicy in any language), with separator `__`: the
/// remote topic is `us-east__<topic>`, checkpoints go to `us-east__checkpoints.internal`, and a
/// topic named as a copy from the target is not sent back. (Not `_`: Kafka refuses
/// `mm2-offset-syncs_us-west_internal` beside the stand's `mm2-offset-syncs.us-west.internal`,
/// names that differ only in `.` and `_`.)
fn names_like_mm2_with_its_separator(component: &std::path::Path) {
    let s = stand();
    let topic = unique("named");
    let looped = format!("us-west__{}", unique("looped"));
    let late = unique("named-late");
    for t in [&topic, &looped] {
        create_topic(&s.east, t, 1, 1, &[]);
        produce(&s.east, t, &(0..10).map(|i| TestRecord::kv(0, "k", &i.to_string())).collect::<Vec<_>>(), &[]);
    }
    let group = unique("named-cg");
    commit(&s.east, &group, &topic, 5);
    let extra = format!(
        "us-east->us-west.topics = {topic}, {looped}, {late}\ngroups = {group}\nreplication.policy.wasm = {}\n\
         replication.policy.separator = __\n",
        component.display()
    );
    let strait = Strait::start(&east_to_west(&topic, &extra));
    let remote = format!("us-east__{topic}");
    assert!(wait_until(WAIT, || record_count(&s.west, &remote) == 10), "log:\n{}", strait.log_text());
    let synced = crate::support::groups::wait_for_group_sync_in(
        &s.west,
        "us-east__checkpoints.internal",
        &group,
        &remote,
        &[5],
        &strait,
    );
    assert_eq!(synced, vec![5], "checkpoints in us-east__checkpoints.internal, a 1:1 copy resumes at 5");
    // A topic created later is discovered in a later round: the looped one had every chance.
    create_topic(&s.east, &late, 1, 1, &[]);
    assert!(
        wait_until(WAIT, || partition_count(&s.west, &format!("us-east__{late}")) == Some(1)),
        "log:\n{}",
        strait.log_text()
    );
    assert_eq!(
        partition_count(&s.west, &format!("us-east__{looped}")),
        None,
        "{looped} came from us-west: not sent back"
    );
}

#[test]
fn policy_test_runs_a_components_hooks_on_records_from_a_file_without_kafka() {
    let dir = std::env::temp_dir().join("strait-tests");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let records = dir.join(format!("{}.jsonl", unique("policy-test")));
    std::fs::write(
        &records,
        concat!(
            r#"{"topic":"payments","key":"p0","value":"{\"card\":\"4111\"}","headers":{"x-strait-drop":"yes"},"timestamp":1}"#,
            "\n",
            r#"{"topic":"payments","key":"p1","value":"{\"id\":1,\"card\":\"4111-0001\"}","headers":[["trace","t1"]],"timestamp":2}"#,
            "\n",
            r#"{"topic":"payments","key":null,"value":null,"timestamp":3}"#,
            "\n"
        ),
    )
    .expect("records file");
    let component = plugin("header-filter");
    let (ok, out, err) = strait_cli(&[
        "policy",
        "test",
        "--component",
        &component.to_string_lossy(),
        "--records",
        &records.to_string_lossy(),
        "--property",
        "replication.policy.header-filter.mask.field=card",
    ]);
    assert!(ok, "{out}{err}");
    let lines: Vec<serde_json::Value> = out.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert_eq!(lines.len(), 3, "one verdict per record:\n{out}");
    assert_eq!(lines[0]["verdict"], "drop", "{out}");
    assert_eq!(lines[1]["verdict"], "edit", "{out}");
    assert_eq!(lines[1]["value"], r#"{"id":1,"card":"***"}"#, "{out}");
    assert_eq!(lines[1]["headers"], serde_json::json!([["trace", "t1"]]), "{out}");
    assert_eq!(lines[2]["verdict"], "keep", "{out}");
    assert!(out.starts_with(&format!("component {}: hooks records;", component.display())), "{out}");
    assert!(out.contains("records: 3 in, 1 dropped, 1 edited"), "{out}");
}
