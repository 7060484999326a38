#!/usr/bin/env bash
# Latency where the machine is not saturated (issue 15): the ceiling, strait and real MirrorMaker 2
# each replicate a fixed-rate load (10,000 records/s of 1 KiB, 60 s after a 5 s warm-up) while a
# consumer on the target measures arrival minus source timestamp, in three rounds in which the
# contenders take turns (about 13 minutes). Appends a table to benches/RESULTS.md. Any
# strait-bench option may follow, e.g. --rate 5000, --sizes 100,1024, --repeat 1, or
# --strait-extra 'us-west.producer.linger.ms = 1' to try a setting on strait.
# Usage: benches/latency.sh [OPTIONS]
set -euo pipefail
cd "$(dirname "$0")"
exec ./vs-mm2.sh --steady-only --rate 10000 --steady-seconds 60 --sizes 1024 --repeat 3 "$@"
