#!/usr/bin/env bash
# What carrying schema ids across costs (issue 32, item 5): the same backlog of 1 KiB records in
# Confluent's wire format (magic byte 0, the id of a schema registered on us-east's registry,
# then data) drained by the same release strait
#   A) without registries (records cross as bytes), and
#   B) with a registry on each side and `schema.ids = translate` (the id in every value
#      rewritten to the target's; the keys are empty),
# in turns (A B, then B A, ...) so the shared machine's noise hits both alike, at-least-once. Each line
# gives records/s and CPU per record; compare the medians of each mode.
# Usage: benches/schemas.sh [RECORDS] [RECORD_SIZE] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
RECORDS=${1:-1000000}
SIZE=${2:-1024}
ROUNDS=${3:-6}
. benches/lib.sh
scripts/ensure-toolchain.sh
cargo build --release --quiet -p strait
EAST=$(scripts/kafka.sh start us-east 3 19092)
WEST=$(scripts/kafka.sh start us-west 1 29092)
EAST_REGISTRY=$(scripts/registry.sh start us-east 18081)
WEST_REGISTRY=$(scripts/registry.sh start us-west 28081)
SOURCE=bench-schemas-$SIZE-$$
scripts/kafka.sh topics us-east --create --topic "$SOURCE" --partitions 6 --replication-factor 1 >/dev/null

# The schema the records carry, and another on the target first, so the ids differ.
register() { # register URL SUBJECT RECORD_NAME: prints the id
  curl -sf -X POST -H 'Content-Type: application/vnd.schemaregistry.v1+json' "$1/subjects/$2/versions" \
    --data "{\"schema\": \"{\\\"type\\\":\\\"record\\\",\\\"name\\\":\\\"$3\\\",\\\"fields\\\":[{\\\"name\\\":\\\"data\\\",\\\"type\\\":\\\"string\\\"}]}\"}" |
    sed 's/.*"id":\([0-9]*\).*/\1/'
}
register "$WEST_REGISTRY" "shift-$$-value" "Shift$$" >/dev/null
ID=$(register "$EAST_REGISTRY" "$SOURCE-value" "Bench$$")
echo "records carry schema id $ID of us-east's registry" >&2

# 64 payloads of SIZE bytes in the wire format, one per line, for ProducerPerformance.
PAYLOADS=$(mktemp /tmp/strait-bench-payloads.XXXXXX)
python3 - "$ID" "$SIZE" >"$PAYLOADS" <<'PY'
import random, string, sys
sid, size = int(sys.argv[1]), int(sys.argv[2])
prefix = b"\x00" + sid.to_bytes(4, "big")
assert b"\n" not in prefix, "an id whose bytes hold a newline; register another schema"
for _ in range(64):
    data = "".join(random.choices(string.ascii_letters + string.digits, k=size - len(prefix))).encode()
    sys.stdout.buffer.write(prefix + data + b"\n")
PY
echo "loading $RECORDS records of $SIZE B into $SOURCE" >&2
scripts/kafka.sh tool org.apache.kafka.tools.ProducerPerformance --topic "$SOURCE" --num-records "$RECORDS" \
  --payload-file "$PAYLOADS" --throughput -1 --bootstrap-server "$EAST" \
  --command-property acks=1 linger.ms=10 batch.size=262144 >/dev/null

IDS="@LABEL@.schema.registry.url = $EAST_REGISTRY
us-west.schema.registry.url = $WEST_REGISTRY
schema.ids = translate"
# The order swaps every other round: a drain after another finds warmer pages and clients.
for round in $(seq 1 "$ROUNDS"); do
  if ((round % 2)); then
    drain target/release/strait "bytes-$$-$round" 1 ""
    drain target/release/strait "ids-$$-$round" 1 "$IDS"
  else
    drain target/release/strait "ids-$$-$round" 1 "$IDS"
    drain target/release/strait "bytes-$$-$round" 1 ""
  fi
done
