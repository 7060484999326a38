#!/usr/bin/env bash
# scripts/wan.sh - a real network fault proxy (Toxiproxy, built from the Go module proxy)
# between clients and a cluster started with `kafka.sh start --wan`: every client connection to
# that cluster crosses a link whose round trip, jitter, bandwidth and faults are set here.
#
# Usage:
#   wan.sh fetch                          build Toxiproxy's server once (idempotent)
#   wan.sh start                          start the proxy server (API on 127.0.0.1:$STRAIT_WAN_API_PORT)
#   wan.sh stop                           stop it (every link goes with it)
#   wan.sh link CLUSTER                   a proxy per broker of a --wan cluster, its advertised
#                                         port in front of the broker's client port (idempotent)
#   wan.sh shape CLUSTER RTT_MS [JITTER_MS [RATE_KBPS]]
#                                         the link's shape: RTT_MS round trip (half each way) with
#                                         JITTER_MS of jitter, and a bandwidth cap each way
#                                         (0 = none); replaces the previous shape, keeps faults
#   wan.sh fault CLUSTER blackhole        every byte dropped, connections held open
#   wan.sh fault CLUSTER reset MS         every connection reset MS ms after it opens
#   wan.sh fault CLUSTER rate KBPS        bandwidth collapsed to KBPS KB/s each way
#   wan.sh heal CLUSTER                   the faults removed, the shape kept
#   wan.sh toxics CLUSTER                 the toxics on broker 0's link, as the proxy lists them
#
# State: ${STRAIT_WAN_DIR:-/tmp/strait-wan}/ (pid, server.log). Clusters: kafka.sh's state dir.
set -euo pipefail
# shellcheck source=go-module.sh
source "$(dirname "${BASH_SOURCE[0]}")/go-module.sh"

VERSION=v2.5.0
MODULE=github.com/Shopify/toxiproxy/v2
BIN=${STRAIT_CACHE:-$HOME/.cache/strait}/toxiproxy-$VERSION/toxiproxy-server
STATE=${STRAIT_WAN_DIR:-/tmp/strait-wan}
KAFKA_STATE=${STRAIT_KAFKA_DIR:-/tmp/strait-kafka}
API=http://127.0.0.1:${STRAIT_WAN_API_PORT:-8474}

log() { echo "wan.sh: $*" >&2; }
die() { log "$*"; exit 1; }
usage() { sed -n '6,21s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }

fetch() { go_module_build "$MODULE" "$VERSION" ./cmd/server "$BIN"; }

alive() { [[ -f $STATE/pid ]] && kill -0 "$(<"$STATE/pid")" 2>/dev/null; }

# curl against the proxy's API; fails with the proxy's answer on an HTTP error.
api() {
  local method=$1 path=$2 body=${3-} out code
  out=$(mktemp)
  code=$(curl -s -o "$out" -w '%{http_code}' -X "$method" -H 'Content-Type: application/json' \
    ${body:+--data "$body"} "$API$path") || { rm -f "$out"; die "the proxy does not answer at $API (wan.sh start)"; }
  if [[ $code != 2* ]]; then
    log "$method $path: HTTP $code $(<"$out")"
    rm -f "$out"
    return 1
  fi
  cat "$out"
  rm -f "$out"
}

cmd_start() {
  alive && return 0
  fetch
  mkdir -p "$STATE"
  setsid "$BIN" -host 127.0.0.1 -port "${API##*:}" >"$STATE/server.log" 2>&1 </dev/null &
  echo $! >"$STATE/pid"
  local i
  for ((i = 0; i < 100; i++)); do
    curl -s -o /dev/null "$API/version" && return 0
    alive || { tail -n 20 "$STATE/server.log" >&2; die "the proxy exited at start (log: $STATE/server.log)"; }
    sleep 0.1
  done
  die "the proxy did not answer at $API within 10 s (log: $STATE/server.log)"
}

cmd_stop() {
  alive || { rm -f "$STATE/pid"; return 0; }
  local pid; pid=$(<"$STATE/pid")
  kill "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$STATE/pid"
}

# "BROKERS BASEPORT" of a cluster started with --wan.
cluster_of() {
  local conf=$KAFKA_STATE/$1/cluster.conf
  [[ -f $conf ]] || die "no cluster '$1' (kafka.sh start --wan $1 BROKERS BASEPORT)"
  [[ $(<"$conf") == *" wan" ]] || die "cluster '$1' was not started with --wan (its settings: $(<"$conf"))"
  read -r BROKERS BASEPORT _ <"$conf"
}

proxies() {
  local i
  for ((i = 0; i < BROKERS; i++)); do echo "$1-$i"; done
}

cmd_link() {
  (($# == 1)) || usage
  cluster_of "$1"
  local i name
  for ((i = 0; i < BROKERS; i++)); do
    name=$1-$i
    api GET "/proxies/$name" >/dev/null 2>&1 && continue
    api POST /proxies "{\"name\":\"$name\",\"listen\":\"127.0.0.1:$((BASEPORT + 200 + i))\",\"upstream\":\"127.0.0.1:$((BASEPORT + i))\",\"enabled\":true}" >/dev/null
  done
}

# Adds toxic NAME of TYPE with ATTRIBUTES (JSON) on both directions of every link of the cluster.
add_toxic() {
  local cluster=$1 name=$2 type=$3 attributes=$4 p stream
  for p in $(proxies "$cluster"); do
    for stream in upstream downstream; do
      api POST "/proxies/$p/toxics" \
        "{\"name\":\"$name-$stream\",\"type\":\"$type\",\"stream\":\"$stream\",\"toxicity\":1.0,\"attributes\":$attributes}" >/dev/null
    done
  done
}

# Removes the toxics whose names start with PREFIX from every link of the cluster.
remove_toxics() {
  local cluster=$1 prefix=$2 p t
  for p in $(proxies "$cluster"); do
    for t in $(api GET "/proxies/$p/toxics" | grep -o '"name":"[^"]*"' | cut -d'"' -f4); do
      [[ $t == "$prefix"* ]] && api DELETE "/proxies/$p/toxics/$t" >/dev/null
    done
  done
  return 0
}

cmd_shape() {
  (($# >= 2 && $# <= 4)) || usage
  local cluster=$1 rtt=$2 jitter=${3:-0} rate=${4:-0}
  [[ $rtt =~ ^[0-9]+$ && $jitter =~ ^[0-9]+$ && $rate =~ ^[0-9]+$ ]] || die "RTT_MS, JITTER_MS and RATE_KBPS are whole numbers"
  cluster_of "$cluster"
  remove_toxics "$cluster" shape-
  ((rtt == 0 && jitter == 0)) || add_toxic "$cluster" shape-latency latency "{\"latency\":$((rtt / 2)),\"jitter\":$((jitter / 2))}"
  ((rate == 0)) || add_toxic "$cluster" shape-rate bandwidth "{\"rate\":$rate}"
}

cmd_fault() {
  (($# >= 2)) || usage
  local cluster=$1 kind=$2
  cluster_of "$cluster"
  case $kind in
    # timeout 0: data is dropped and the connection stays open until the toxic goes.
    blackhole) add_toxic "$cluster" fault-blackhole timeout '{"timeout":0}' ;;
    reset) [[ ${3-} =~ ^[0-9]+$ ]] || usage; add_toxic "$cluster" fault-reset reset_peer "{\"timeout\":$3}" ;;
    rate) [[ ${3-} =~ ^[1-9][0-9]*$ ]] || usage; add_toxic "$cluster" fault-rate bandwidth "{\"rate\":$3}" ;;
    *) usage ;;
  esac
}

main() {
  local cmd=${1-}; shift || true
  case $cmd in
    fetch) fetch ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    link) cmd_link "$@" ;;
    shape) cmd_shape "$@" ;;
    fault) cmd_fault "$@" ;;
    heal) (($# == 1)) || usage; cluster_of "$1"; remove_toxics "$1" fault- ;;
    toxics) (($# == 1)) || usage; api GET "/proxies/$1-0/toxics"; echo ;;
    *) usage ;;
  esac
}

main "$@"
