#!/usr/bin/env bash
# What each flow costs (issue 15): strait and real MirrorMaker 2 run the same config of N flows
# (source aliases on us-east, each replicating its own 3-partition topic to us-west), for each N
# asked; threads, RSS and CPU idle and under a moderate load (2,000 records/s of 1 KiB over all
# the flows), and the cost of each flow added. Release build; a Markdown table on stdout.
# With `hub`, one hub-and-spoke config instead: us-west is the hub, four 1-broker clusters of
# their own (spoke1..spoke4, ports 45092..48092, stopped afterwards) are the spokes; each
# spoke's orders fan in to the hub, the hub's config fans out to every spoke (8 flows).
# Usage: benches/flows.sh [COUNTS]   (default 1,20)
#        benches/flows.sh hub
set -euo pipefail
cd "$(dirname "$0")/.."
COUNTS=${1:-1,20}
scripts/ensure-toolchain.sh
scripts/kafka.sh fetch >/dev/null
cargo build --release --quiet --workspace
EAST=$(scripts/kafka.sh start us-east 3 19092)
WEST=$(scripts/kafka.sh start us-west 1 29092)
if [[ $COUNTS == hub ]]; then
  SPOKES=()
  trap 'for i in 1 2 3 4; do scripts/kafka.sh stop spoke$i >/dev/null 2>&1 || true; done' EXIT
  for i in 1 2 3 4; do SPOKES+=("$(scripts/kafka.sh start --fresh spoke$i 1 $((44092 + 1000 * i)))"); done
  echo "flows: hub (us-west) and 4 spokes, $(nproc) cores, $(date -u +%F)" >&2
  "${CARGO_TARGET_DIR:-target}/release/strait-flows" "$EAST" "$WEST" hub "$(IFS=,; echo "${SPOKES[*]}")"
  exit
fi
echo "flows: counts $COUNTS, $(nproc) cores, $(date -u +%F)" >&2
"${CARGO_TARGET_DIR:-target}/release/strait-flows" "$EAST" "$WEST" "$COUNTS"
