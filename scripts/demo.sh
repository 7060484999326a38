#!/usr/bin/env bash
# The live demo: two real Kafka clusters on loopback (the seed articles' stand), 200 orders on
# us-east, strait mirroring them to us-west as us-east.orders, and what arrived, per partition.
set -euo pipefail
cd "$(dirname "$0")/.."
K=scripts/kafka.sh
CONFIG=examples/active-passive/mm2.properties

scripts/ensure-toolchain.sh
echo "== building strait (release)"
cargo build --release --quiet
STRAIT=target/release/strait

echo "== starting us-east (3 brokers) and us-west (1 broker), fresh"
trap '[[ -n ${STRAIT_PID:-} ]] && kill $STRAIT_PID 2>/dev/null; $K stop us-east >/dev/null; $K stop us-west >/dev/null' EXIT
EAST=$($K start --fresh us-east 3 19092)
WEST=$($K start --fresh us-west 1 29092)

echo "== creating orders (3 partitions, RF 3, min.insync.replicas=2) and producing 200 records with acks=all"
$K topics us-east --create --topic orders --partitions 3 --replication-factor 3 --config min.insync.replicas=2 >/dev/null
seq 1 200 | awk '{printf "order-%d:{\"id\":%d,\"amount\":%d}\n", $1, $1, $1*7%100}' |
  $K tool org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$EAST" --topic orders \
    --command-property acks=all --reader-property parse.key=true --reader-property key.separator=:

echo "== running strait on $CONFIG"
LOG=$(mktemp /tmp/strait-demo.XXXXXX.log)
STRAIT_LOG=info $STRAIT run --config "$CONFIG" --metrics-listen 127.0.0.1:9464 2>"$LOG" &
STRAIT_PID=$!

count() {
  $K tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$WEST" --topic us-east.orders 2>/dev/null |
    awk -F: '{s+=$3} END {print s+0}'
}
for _ in $(seq 1 60); do
  [[ $(count) -ge 200 ]] && break
  sleep 1
done

echo "== us-west now has us-east.orders with $(count) records; per partition:"
$K tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$WEST" --topic us-east.orders 2>/dev/null
echo "== first records of each partition on us-west (partition, offset, key, value):"
$K tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$WEST" --topic us-east.orders \
  --from-beginning --max-messages 200 --timeout-ms 20000 \
  --formatter-property print.partition=true --formatter-property print.offset=true --formatter-property print.key=true 2>/dev/null |
  sort -t: -k2,2 -s | awk '{p=$1; if (n[p]++ < 3) print}'
echo "== strait metrics (records replicated per partition):"
curl -s http://127.0.0.1:9464/metrics 2>/dev/null | grep '^strait_replication_records_total' || true
echo "== strait's log: $LOG"
kill -TERM $STRAIT_PID; wait $STRAIT_PID || true; STRAIT_PID=
tail -n 3 "$LOG"
[[ $(count) -eq 200 ]] && echo "== demo OK: 200/200 replicated" || { echo "== demo FAILED: $(count)/200"; exit 1; }
