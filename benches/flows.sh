#!/usr/bin/env bash
# What each flow costs (issue 15): strait and real MirrorMaker 2 run the same config of N flows
# (source aliases on us-east, each replicating its own 3-partition topic to us-west), for each N
# asked; threads, RSS and CPU idle and under a moderate load (2,000 records/s of 1 KiB over all
# the flows), and the cost of each flow added. Release build; a Markdown table on stdout.
# Usage: benches/flows.sh [COUNTS]   (default 1,20)
set -euo pipefail
cd "$(dirname "$0")/.."
COUNTS=${1:-1,20}
scripts/ensure-toolchain.sh
scripts/kafka.sh fetch >/dev/null
cargo build --release --quiet --workspace
EAST=$(scripts/kafka.sh start us-east 3 19092)
WEST=$(scripts/kafka.sh start us-west 1 29092)
echo "flows: counts $COUNTS, $(nproc) cores, $(date -u +%F)" >&2
"${CARGO_TARGET_DIR:-target}/release/strait-flows" "$EAST" "$WEST" "$COUNTS"
