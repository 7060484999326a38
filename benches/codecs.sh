#!/usr/bin/env bash
# Which codec strait's target producer should compress with (issue 15): bytes on the wire and
# producer CPU per record for none, gzip, snappy, lz4 and zstd, on the benchmark's records (Kafka's
# ProducerPerformance letters, 1 KiB) and on JSON events. Release build of the bench tool only;
# writes a Markdown table to stdout.
# Usage: benches/codecs.sh [RECORDS]   (default 200000 per codec and kind)
set -euo pipefail
cd "$(dirname "$0")/.."
RECORDS=${1:-200000}
scripts/ensure-toolchain.sh
cargo build --release --quiet -p strait-bench --bin strait-codecs
WEST=$(scripts/kafka.sh start us-west 1 29092)
TOPIC=codecs-$$-$RANDOM
scripts/kafka.sh topics us-west --create --topic "$TOPIC" --partitions 6 --replication-factor 1 >/dev/null
echo "codecs: $RECORDS records per codec and kind to $TOPIC on us-west ($WEST), $(nproc) cores, $(date -u +%F)" >&2
"${CARGO_TARGET_DIR:-target}/release/strait-codecs" "$WEST" "$TOPIC" "$RECORDS"
scripts/kafka.sh topics us-west --delete --topic "$TOPIC" >/dev/null || true
