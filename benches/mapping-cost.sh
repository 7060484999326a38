#!/usr/bin/env bash
# What exact offset translation costs on the wire: replicate a pre-loaded backlog with strait's
# default settings and read, from its metrics, the bytes the offset mapping added (closed runs
# plus the open run on position records) beside the MM2-format offset syncs it also writes.
# Two sources: plain records (the seed's shape), and transactions committed every 100 ms
# (each commit marker breaks a run); and plain records replicated by strait in exactly-once
# mode, whose own commit markers break its runs on the target. Prints bytes per million
# replicated records.
# Usage: benches/mapping-cost.sh [RECORDS] [RECORD_SIZE]
set -euo pipefail
cd "$(dirname "$0")/.."
RECORDS=${1:-1000000}
SIZE=${2:-100}
K=scripts/kafka.sh
. benches/lib.sh
cargo build --release --quiet
EAST=$($K start us-east 3 19092)
WEST=$($K start us-west 1 29092)

measure() { # $1 = label, $2 = extra strait config lines, the rest: extra ProducerPerformance arguments
  local label=$1 extra=$2; shift 2
  local topic=mapping-$label-$$ alias=m$label$$ cfg port metrics
  $K topics us-east --create --topic "$topic" --partitions 3 --replication-factor 1 >/dev/null
  $K tool org.apache.kafka.tools.ProducerPerformance --topic "$topic" --num-records "$RECORDS" --record-size "$SIZE" \
    --throughput -1 --bootstrap-server "$EAST" "$@" >/dev/null
  cfg=$(mktemp /tmp/strait-mapping.XXXXXX.properties)
  port=$((20000 + RANDOM % 20000))
  printf 'clusters = %s, us-west\n%s.bootstrap.servers = %s\nus-west.bootstrap.servers = %s\n%s->us-west.enabled = true\n%s->us-west.topics = %s\n%s\n' \
    "$alias" "$alias" "$EAST" "$WEST" "$alias" "$alias" "$topic" "$extra" >"$cfg"
  strait_start "$cfg" "$port"
  wait_replicated "$port" "$RECORDS"
  sleep 3 # the last position flush
  metrics=$(curl -s "http://127.0.0.1:$port/metrics")
  strait_stop
  awk -v n="$RECORDS" -v l="$label" '
    /^strait_offset_mapping_bytes_total/ {mb+=$2} /^strait_offset_runs_stored_total/ {runs+=$2}
    /^strait_positions_stored_total/ {pos+=$2} /^strait_offset_syncs_sent_total/ {syncs+=$2}
    /^strait_offset_syncs_bytes_total/ {sb+=$2}
    END {m=1e6/n; printf "%-13s records %d | exact mapping: %d runs, %d position writes, %.0f B per million records | MM2 offset syncs: %d, %.0f B per million records\n", l, n, runs, pos, mb*m, syncs, sb*m}' <<<"$metrics"
}

measure plain "" --producer-props acks=1 linger.ms=10 batch.size=262144
measure transactions "" --transactional-id "mapping-tx-$$" --transaction-duration-ms 100 --producer-props acks=all linger.ms=10 batch.size=262144
measure exactly-once "exactly.once.source.support = enabled" --producer-props acks=1 linger.ms=10 batch.size=262144
