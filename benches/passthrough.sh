#!/usr/bin/env bash
# How far below librdkafka is the floor? strait-passthrough (record batches forwarded undecoded,
# bench/src/bin/passthrough) beside strait-ceiling (the librdkafka consume-produce loop) on the
# same backlog, at 100 B, 1 KiB and 10 KiB, on random data (incompressible, loaded and copied
# uncompressed) and on JSON-like data (loaded lz4-compressed; the ceiling decodes it and
# compresses it again with lz4, the pass-through forwards it as it is). ROUNDS rounds, the two
# taking turns and the order swapped every other round; benches/passthrough-summary.py prints the
# medians, their spread and the ratios. The JSON of every run stays in
# benches/results/passthrough-DATE/.
# Usage: benches/passthrough.sh [--rounds N] [--scale F]   (F multiplies the backlogs: 0.1 for a try)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=3 SCALE=1
while (($#)); do
  case $1 in
    --rounds) ROUNDS=$2 ;;
    --scale) SCALE=$2 ;;
    *) sed -n '10s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
  esac
  shift 2
done
scripts/ensure-toolchain.sh
scripts/kafka.sh fetch >/dev/null
cargo build --release --quiet -p strait-bench
out=benches/results/passthrough-$(date -u +%Y%m%d-%H%M)
mkdir -p "$out"
# About 1 GB of values per backlog (500 MB at 100 B, where records, not bytes, are the work).
backlog() { awk -v s="$1" -v f="$SCALE" 'BEGIN { printf "%d", f * (s == 100 ? 5000000 : s == 1024 ? 1000000 : 100000) }'; }
for ((round = 1; round <= ROUNDS; round++)); do
  order=ceiling,passthrough
  ((round % 2)) || order=passthrough,ceiling
  for data in random json; do
    codec=none
    [[ $data == json ]] && codec=lz4
    for size in 100 1024 10240; do
      echo "passthrough.sh: round $round, $data, $size B ($order)" >&2
      target/release/strait-bench --only "$order" --drain-only --sizes "$size" --backlog "$(backlog "$size")" \
        --data "$data" --codec "$codec" --results "$out/round$round-$data-$size" >/dev/null
    done
  done
done
python3 benches/passthrough-summary.py "$out" "benches/passthrough.sh --rounds $ROUNDS --scale $SCALE"
