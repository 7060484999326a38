#!/usr/bin/env bash
# The same drains by two versions of strait, taken in turns (issue 31, item 7): a change that
# only restructures the engine must cost nothing per record. Builds this checkout and REV in
# release (REV in a git worktree sharing this target directory, so only strait's own crates
# build twice), pre-loads one backlog, then drains it with each binary in turn, at-least-once
# and exactly-once, ROUNDS times: before, after, before, after, ... so the shared machine's
# noise falls on both.
# Usage: benches/before-after.sh REV [RECORDS] [RECORD_SIZE] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:?usage: benches/before-after.sh REV [RECORDS] [RECORD_SIZE] [ROUNDS]}
RECORDS=${2:-1000000}
SIZE=${3:-1024}
ROUNDS=${4:-3}
. benches/lib.sh
scripts/ensure-toolchain.sh
BINS=$(mktemp -d /tmp/strait-before-after.XXXXXX)
cargo build --release --quiet -p strait
cp target/release/strait "$BINS/after"
TREE="$BINS/tree"
git worktree add --quiet --detach "$TREE" "$REV"
trap 'git worktree remove --force "$TREE" >/dev/null 2>&1 || true' EXIT
CARGO_TARGET_DIR="$PWD/target" cargo build --release --quiet -p strait --manifest-path "$TREE/Cargo.toml"
cp target/release/strait "$BINS/before"
# Leave this checkout's own binary in place for the other scripts.
cargo build --release --quiet -p strait
echo "before: $REV ($(git rev-parse --short "$REV")), after: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' with changes')"
SOURCE=bench-ba-$SIZE-$$
load_backlog "$SOURCE" "$RECORDS" "$SIZE"
for round in $(seq 1 "$ROUNDS"); do
  for bin in before after; do
    drain "$BINS/$bin" "$bin-alo-$$-$round" 1 ""
  done
  for bin in before after; do
    drain "$BINS/$bin" "$bin-eos-$$-$round" 1 "exactly.once.source.support = enabled"
  done
done
