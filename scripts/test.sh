#!/usr/bin/env bash
# Runs every test: unit tests (engine and policy components), and the integration tests on real Kafka clusters on loopback,
# which this script starts (scripts/kafka.sh) and stops again afterwards, with a schema registry next to each
# (scripts/registry.sh, started by the tests that need them), and a fault proxy in front of the cluster the WAN tests
# start (scripts/wan.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
K=scripts/kafka.sh
scripts/ensure-toolchain.sh
trap '$K stop-all >/dev/null 2>&1 || true; scripts/registry.sh stop-all >/dev/null 2>&1 || true; scripts/wan.sh stop >/dev/null 2>&1 || true' EXIT
$K start us-east 3 19092 >/dev/null
$K start us-west 1 29092 >/dev/null
cargo test --workspace "$@"
# The policy components' own unit tests run on the host.
cargo test --manifest-path plugins/Cargo.toml
