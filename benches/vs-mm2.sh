#!/usr/bin/env bash
# strait vs real MirrorMaker 2 vs the raw copy ceiling, side by side on the same clusters and the
# same data, in one run (issue 5). The full run (release build, 20-30 minutes) appends a table to
# benches/RESULTS.md and writes JSON and an SVG chart to benches/results/. --quick is the smoke
# test CI runs: small backlogs, the debug build, no table appended; its figures mean nothing.
# Usage: benches/vs-mm2.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-toolchain.sh
scripts/kafka.sh fetch >/dev/null
if [[ ${1-} == --quick ]]; then
  cargo build --quiet --workspace
  exec target/debug/strait-bench --results "${TMPDIR:-/tmp}/strait-bench-quick" "$@"
fi
cargo build --release --quiet --workspace
exec target/release/strait-bench "$@"
