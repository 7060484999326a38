#!/usr/bin/env bash
# strait, real MirrorMaker 2 and the copy ceiling at distance: the loopback stand and stands
# with one cluster across a link of each round trip in RTTS (ms, Toxiproxy, scripts/wan.sh),
# taken in turns, ROUNDS rounds, the order rotated every round, so a slow spell of the shared
# machine falls on all (RTTS empty: loopback alone). Each run drains a BACKLOG-record backlog of
# SIZE-byte records (1 KiB by default) with every contender of ONLY in turn, then follows a
# steady RATE for SECONDS. benches/wan-summary.py prints the medians, their spread and the
# ratios; the JSON of every run stays in benches/results/wan-DATE-ACROSS-PARTITIONS-SIZE/.
# Usage: benches/wan.sh [--rtt "MS ..."] [--across target|source] [--rounds N] [--partitions P]
#                       [--backlog N] [--rate R] [--seconds S] [--only "CONTENDER ..."] [--size B]
set -euo pipefail
cd "$(dirname "$0")/.."
RTT=100 ACROSS=target ROUNDS=3 PARTITIONS=6 BACKLOG=1000000 RATE=10000 SECONDS_=20 SIZE=1024
ONLY="ceiling strait mm2"
while (($#)); do
  case $1 in
    --rtt) RTT=$2 ;;
    --across) ACROSS=$2 ;;
    --rounds) ROUNDS=$2 ;;
    --partitions) PARTITIONS=$2 ;;
    --backlog) BACKLOG=$2 ;;
    --rate) RATE=$2 ;;
    --seconds) SECONDS_=$2 ;;
    --only) ONLY=$2 ;;
    --size) SIZE=$2 ;;
    *) sed -n '9,10s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
  esac
  shift 2
done
scripts/ensure-toolchain.sh
scripts/kafka.sh fetch >/dev/null
scripts/wan.sh fetch
cargo build --release --quiet --workspace
out=benches/results/wan-$(date -u +%Y%m%d-%H%M)-$ACROSS-$PARTITIONS-$SIZE
mkdir -p "$out"
read -ra rtts <<<"0 $RTT"
read -ra contenders <<<"$ONLY"
for ((round = 1; round <= ROUNDS; round++)); do
  # Round r starts at the r-th round trip and the r-th contender, so each comes first in turn.
  n=${#rtts[@]} k=${#contenders[@]}
  for ((i = 0; i < n; i++)); do
    rtt=${rtts[(i + round - 1) % n]}
    only=
    for ((j = 0; j < k; j++)); do only+=${only:+,}${contenders[(j + round - 1) % k]}; done
    echo "wan.sh: round $round, rtt $rtt ms, $only" >&2
    target/release/strait-bench --sizes "$SIZE" --backlog "$BACKLOG" --rate "$RATE" --partitions "$PARTITIONS" \
      --steady-seconds "$SECONDS_" --only "$only" --rtt "$rtt" --across "$ACROSS" \
      --results "$out/round$round-rtt$rtt" >/dev/null
  done
  # The proxy and the cluster behind it go between rounds; the next run starts them afresh.
  scripts/wan.sh stop
done
python3 benches/wan-summary.py "$out" "benches/wan.sh --rtt \"$RTT\" --across $ACROSS --rounds $ROUNDS --partitions $PARTITIONS --size $SIZE --backlog $BACKLOG --rate $RATE --seconds $SECONDS_ --only \"$ONLY\""
