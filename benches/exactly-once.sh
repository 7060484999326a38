#!/usr/bin/env bash
# End to end on real clusters (issue 12): how fast strait drains the same pre-loaded backlog,
# and the CPU it spends per record,
#   A) at-least-once, one process (the default),
#   B) exactly-once (`exactly.once.source.support = enabled`, default transaction interval),
#   C) at-least-once, two processes on the same config (the group splits the tasks),
# alternating A B C A B C ... so the shared machine's noise hits all alike.
# Usage: benches/exactly-once.sh [RECORDS] [RECORD_SIZE] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
RECORDS=${1:-1000000}
SIZE=${2:-1024}
ROUNDS=${3:-2}
. benches/lib.sh
scripts/ensure-toolchain.sh
cargo build --release --quiet
SOURCE=bench-eos-$SIZE-$$
load_backlog "$SOURCE" "$RECORDS" "$SIZE"

for round in $(seq 1 "$ROUNDS"); do
  drain target/release/strait "alo-$$-$round" 1 ""
  drain target/release/strait "eos-$$-$round" 1 "exactly.once.source.support = enabled"
  drain target/release/strait "alo2-$$-$round" 2 ""
done
