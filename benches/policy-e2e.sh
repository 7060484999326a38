#!/usr/bin/env bash
# End to end on real clusters: how long strait takes to drain the same pre-loaded backlog
#   A) with the default policy only (built-in WASM naming, cached per topic, no record hook), and
#   B) with a WASM record hook on every batch (plugins/header-filter, answering "no change"),
# alternating A B A B ... so the shared machine's noise hits both alike. Prints records/s.
# Usage: benches/policy-e2e.sh [RECORDS] [RECORD_SIZE] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
RECORDS=${1:-1000000}
SIZE=${2:-100}
ROUNDS=${3:-2}
. benches/lib.sh
scripts/ensure-toolchain.sh
cargo build --release --quiet
cargo build --release --quiet --manifest-path plugins/Cargo.toml --target wasm32-wasip2
HOOK=$PWD/plugins/target/wasm32-wasip2/release/strait_policy_header_filter.wasm
SOURCE=bench-e2e-$SIZE-$$
load_backlog "$SOURCE" "$RECORDS" "$SIZE"

run() { # $1 = label, $2 = extra config lines. A source alias per run gives each run a fresh
       # remote topic and position topic, so every run drains the whole backlog.
  local label=$1 extra=$2 cfg port start end
  cfg=$(mktemp /tmp/strait-bench.XXXXXX.properties)
  port=$((20000 + RANDOM % 20000))
  printf 'clusters = %s, us-west\n%s.bootstrap.servers = %s\nus-west.bootstrap.servers = %s\n%s->us-west.enabled = true\n%s->us-west.topics = %s\n%s\n' \
    "$label" "$label" "$EAST" "$WEST" "$label" "$label" "$SOURCE" "$extra" >"$cfg"
  start=$(date +%s.%N)
  strait_start "$cfg" "$port"
  wait_replicated "$port" "$RECORDS"
  end=$(date +%s.%N)
  strait_stop
  awk -v n="$RECORDS" -v s="$start" -v e="$end" -v l="$label" 'BEGIN {printf "%s %.0f records/s (%.2f s)\n", l, n/(e-s), e-s}'
}

for round in $(seq 1 "$ROUNDS"); do
  run "default-$$-$round" ""
  run "hook-$$-$round" "replication.policy.wasm = $HOOK"
done
