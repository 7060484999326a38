#!/usr/bin/env bash
# strait vs real MirrorMaker 2 vs the raw copy ceiling, side by side on the same clusters and the
# same data, in one run (issue 5). Full mode takes 15-25 minutes and appends a table to
# benches/RESULTS.md; --quick (a few minutes) is the smoke test CI runs.
# Usage: benches/vs-mm2.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-toolchain.sh
scripts/kafka.sh fetch >/dev/null
cargo build --release --quiet --workspace
exec target/release/strait-bench "$@"
