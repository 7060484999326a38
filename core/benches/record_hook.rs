//! What a record hook costs per record: a batch of 1,000 records packed, handed to the
//! `header-filter` example component (which finds nothing to drop or mask, so it answers "no
//! change") and forwarded untouched.
//!
//! Build the components first:
//! `cargo build --manifest-path plugins/Cargo.toml --target wasm32-wasip2 --release`
//! then `cargo bench -p strait-core --bench record_hook`.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use strait_core::config::Config;
use strait_core::events::PartitionMetrics;
use strait_core::pipeline::{RecordHook, Slot, Slots};
use strait_core::policy::PolicyEngine;
use strait_core::record::{Batch, RecordFilter, SourceOffset};

const RECORDS: usize = 1_000;

fn batch(value_size: usize) -> Batch {
    let mut b = Batch::with_capacity(RECORDS, RECORDS * (value_size + 64));
    let value = vec![b'x'; value_size];
    for i in 0..RECORDS {
        let key = format!("key-{i:08}");
        let headers = [(&b"trace-id"[..], Some(&b"0123456789abcdef"[..]))];
        b.push(0, SourceOffset(i as i64), 1_700_000_000_000 + i as i64, Some(key.as_bytes()), Some(&value), headers);
    }
    b
}

fn hook(component_file: &str) -> RecordHook {
    let path =
        concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins/target/wasm32-wasip2/release/").to_string() + component_file;
    let bytes =
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}; build plugins/ first (see the top of this file)"));
    let flow =
        Config::parse("clusters = a, b\na.bootstrap.servers = h:1\nb.bootstrap.servers = h:2\na->b.enabled = true\n")
            .expect("config")
            .flows
            .remove(0);
    let component = PolicyEngine::shared().expect("engine").compile(component_file, &bytes).expect("component");
    let slots = Slots::default();
    slots.add(Slot {
        source_topic: Arc::from("orders"),
        partition: 0,
        remote_topic: Arc::from("a.orders"),
        metrics: PartitionMetrics::new("a->b", "a.orders", 0),
        resume_run: None,
        start_at: None,
        retired: false,
    });
    RecordHook::new(component.instantiate(&flow).expect("instance"), slots, "a->b")
}

fn record_hook(c: &mut Criterion) {
    let mut group = c.benchmark_group("record_hook");
    group.throughput(Throughput::Elements(RECORDS as u64));
    for value_size in [100, 1024] {
        let mut filter = hook("strait_policy_header_filter.wasm");
        group.bench_function(format!("header_filter_no_change/{value_size}B"), |b| {
            b.iter_batched_ref(|| batch(value_size), |batch| filter.filter(batch).expect("hook"), BatchSize::LargeInput)
        });
        let mut pack_only = hook("strait_policy_header_filter.wasm");
        group.bench_function(format!("pack_only/{value_size}B"), |b| {
            b.iter_batched_ref(
                || batch(value_size),
                |batch| {
                    pack_only.pack(batch);
                    pack_only.unpack(batch);
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, record_hook);
criterion_main!(benches);
