#!/usr/bin/env bash
# End to end on real clusters (issue 12): how fast strait drains the same pre-loaded backlog,
# and the CPU it spends per record,
#   A) at-least-once, one process (the default),
#   B) exactly-once (`exactly.once.source.support = enabled`, default transaction interval),
#   C) at-least-once, two processes on the same config (the group splits the tasks),
# alternating A B C A B C ... so the shared machine's noise hits all alike.
# Usage: benches/exactly-once.sh [RECORDS] [RECORD_SIZE] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
RECORDS=${1:-1000000}
SIZE=${2:-1024}
ROUNDS=${3:-2}
. benches/lib.sh
scripts/ensure-toolchain.sh
cargo build --release --quiet
SOURCE=bench-eos-$SIZE-$$
load_backlog "$SOURCE" "$RECORDS" "$SIZE"

metric() { # metric NAME PORT...: the sum of a metric over the processes' endpoints
  local name=$1 port total=0 v
  shift
  for port in "$@"; do
    v=$( (curl -s "http://127.0.0.1:$port/metrics" || true) | awk -v n="$name" '$1 ~ "^"n"({|$)" {s+=$2} END {printf "%d", s}')
    total=$((total + v))
  done
  echo "$total"
}

cpu_ticks() { # cpu_ticks PID...: user + system clock ticks of the processes so far
  local pid total=0
  for pid in "$@"; do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo "$total"
}

run() { # $1 = label, $2 = processes, $3 = extra config lines. A source alias per run gives each
       # run a fresh remote topic, position topic and group, so every run drains the backlog.
  # The clock starts once the group has settled (each process owns a share of the 6 partitions)
  # and stops when the last record is replicated (exactly-once: committed), so start-up and the
  # group's first rebalance are left out; records/s and CPU/record cover that window only.
  local label=$1 n=$2 extra=$3 cfg start end ticks0 ticks done0 commits i port
  local -a ports=() pids=()
  cfg=$(mktemp /tmp/strait-bench.XXXXXX.properties)
  # One task per partition of the 6-partition source, so two processes can split them.
  printf 'clusters = %s, us-west\n%s.bootstrap.servers = %s\nus-west.bootstrap.servers = %s\n%s->us-west.enabled = true\n%s->us-west.topics = %s\ntasks.max = 6\n%s\n' \
    "$label" "$label" "$EAST" "$WEST" "$label" "$label" "$SOURCE" "$extra" >"$cfg"
  for ((i = 0; i < n; i++)); do
    ports+=($((20000 + RANDOM % 20000)))
    STRAIT_LOG=warn target/release/strait run --config "$cfg" --metrics-listen "127.0.0.1:${ports[$i]}" 2>/dev/null &
    pids+=($!)
  done
  settled() {
    local port
    for port in "${ports[@]}"; do
      (($(metric strait_source_partitions_assigned "$port") >= 1)) || return 1
    done
    (($(metric strait_source_partitions_assigned "${ports[@]}") == 6))
  }
  until settled; do sleep 0.05; done
  start=$(date +%s.%N)
  ticks0=$(cpu_ticks "${pids[@]}")
  done0=$(metric strait_replication_records_total "${ports[@]}")
  while (($(metric strait_replication_records_total "${ports[@]}") < RECORDS)); do sleep 0.05; done
  # Exactly-once: the records count once their transaction commits, which is the next commit
  # (no record is sent while one is under way).
  if [[ $extra == *exactly.once* ]]; then
    commits=$(metric strait_transactions_committed_total "${ports[@]}")
    while (($(metric strait_transactions_committed_total "${ports[@]}") <= commits)); do sleep 0.02; done
  fi
  end=$(date +%s.%N)
  ticks=$(($(cpu_ticks "${pids[@]}") - ticks0))
  kill -TERM "${pids[@]}"
  wait "${pids[@]}" || true
  awk -v n="$((RECORDS - done0))" -v s="$start" -v e="$end" -v l="$label" -v t="$ticks" -v hz="$(getconf CLK_TCK)" \
    'BEGIN {printf "%-28s %8.0f records/s (%8d records in %6.2f s)  %6.2f µs CPU/record\n", l, n/(e-s), n, e-s, t/hz/n*1e6}'
}

for round in $(seq 1 "$ROUNDS"); do
  run "alo-$$-$round" 1 ""
  run "eos-$$-$round" 1 "exactly.once.source.support = enabled"
  run "alo2-$$-$round" 2 ""
done
