#!/usr/bin/env bash
# The seed articles' failover scenario with real MirrorMaker 2 and with strait on the same stand
# (issue 16): how many records a group that fails over to us-west re-reads (or skips) with each.
# Four scenarios: the seed (200 orders over 3 partitions, the group at 40/40/40) with
# offset.lag.max 100 and 0, an uneven split, and a group far behind. Prints a Markdown table.
# Usage: benches/failover.sh   (about 10 minutes; release build of strait and the bench tool)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-toolchain.sh
cargo build --release --quiet --workspace
scripts/kafka.sh fetch >/dev/null
echo "failover: MirrorMaker 2 $(sed -n 's/^KAFKA_VERSION=//p' scripts/kafka.sh) and strait $(git rev-parse --short HEAD), $(nproc) cores, $(date -u '+%F %H:%M UTC')" >&2
"${CARGO_TARGET_DIR:-target}/release/strait-failover"
