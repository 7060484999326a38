#!/usr/bin/env bash
# strait, real MirrorMaker 2 and the copy ceiling at distance: the loopback stand and a stand
# with one cluster across a link of RTT ms (Toxiproxy, scripts/wan.sh), taken in turns, ROUNDS
# rounds, the order swapped every other round, so a slow spell of the shared machine falls on
# both. Each run drains a BACKLOG-record backlog of 1 KiB records and follows a steady RATE.
# benches/wan-summary.py prints the medians, their spread and the ratios; the JSON of every run
# stays in benches/results/wan-DATE/.
# Usage: benches/wan.sh [--rtt MS] [--across target|source] [--rounds N] [--partitions P]
#                       [--backlog N] [--rate R]
set -euo pipefail
cd "$(dirname "$0")/.."
RTT=100 ACROSS=target ROUNDS=3 PARTITIONS=6 BACKLOG=1000000 RATE=10000
while (($#)); do
  case $1 in
    --rtt) RTT=$2 ;;
    --across) ACROSS=$2 ;;
    --rounds) ROUNDS=$2 ;;
    --partitions) PARTITIONS=$2 ;;
    --backlog) BACKLOG=$2 ;;
    --rate) RATE=$2 ;;
    *) sed -n '8,9s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
  esac
  shift 2
done
scripts/ensure-toolchain.sh
scripts/kafka.sh fetch >/dev/null
scripts/wan.sh fetch
cargo build --release --quiet --workspace
out=benches/results/wan-$(date -u +%Y%m%d-%H%M)-$ACROSS-$PARTITIONS
mkdir -p "$out"
for ((round = 1; round <= ROUNDS; round++)); do
  order=(0 "$RTT")
  ((round % 2)) || order=("$RTT" 0)
  for rtt in "${order[@]}"; do
    echo "wan.sh: round $round, rtt $rtt ms" >&2
    target/release/strait-bench --sizes 1024 --backlog "$BACKLOG" --rate "$RATE" --partitions "$PARTITIONS" \
      --rtt "$rtt" --across "$ACROSS" --results "$out/round$round-rtt$rtt" >/dev/null
  done
  # The proxy and the cluster behind it go between rounds; the next run starts them afresh.
  scripts/wan.sh stop
done
python3 benches/wan-summary.py "$out" "benches/wan.sh --rtt $RTT --across $ACROSS --rounds $ROUNDS --partitions $PARTITIONS --backlog $BACKLOG --rate $RATE"
