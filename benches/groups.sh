#!/usr/bin/env bash
# What a checkpoint round pays to read many consumer groups' committed offsets (issue 15): makes
# GROUPS groups on a 1-broker cluster of their own (`bench-groups`, port 16092; made once, kept
# for re-runs), then reads them all with strait's reader one by one and with many requests in
# flight, printing wall time and CPU of each. Release build of the bench tool only.
# Usage: benches/groups.sh [GROUPS]   (default 10000)
set -euo pipefail
cd "$(dirname "$0")/.."
GROUPS_WANTED=${1:-10000}
scripts/ensure-toolchain.sh
cargo build --release --quiet -p strait-bench --bin strait-groups
BOOTSTRAP=$(scripts/kafka.sh start bench-groups 1 16092)
echo "groups: $GROUPS_WANTED groups on bench-groups ($BOOTSTRAP), $(nproc) cores, $(date -u +%F)" >&2
"${CARGO_TARGET_DIR:-target}/release/strait-groups" "$BOOTSTRAP" "$GROUPS_WANTED"
