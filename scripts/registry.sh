#!/usr/bin/env bash
# scripts/registry.sh - a real Confluent-compatible schema registry next to each test cluster:
# Apicurio Registry from Maven Central, in-memory storage, its Confluent API under
# /apis/ccompat/v7. No Docker, just the Maven Central assembly and `java`.
# With --import: AxonOps Schema Registry, built from the Go module proxy, in memory: a registry
# that honours Confluent's IMPORT mode (a schema registered under the id and version given),
# which Apicurio's Confluent API does not (its register request has no id).
#
# Usage:
#   registry.sh fetch                     download and build both registries (idempotent)
#   registry.sh start --import NAME PORT  start an IMPORT-capable registry NAME on 127.0.0.1:PORT
#   registry.sh start [--tls] NAME PORT [USER:PASSWORD]
#                                         start registry NAME on 127.0.0.1:PORT (basic auth when
#                                         USER:PASSWORD is given; https with a certificate made
#                                         for 127.0.0.1, its CA at NAME/ca.pem, with --tls; health
#                                         and metrics on a free port Quarkus picks); last stdout
#                                         line = its URL
#   registry.sh stop NAME                 stop NAME; no-op if stopped
#   registry.sh stop-all                  stop every registry under the state dir
#   registry.sh url NAME                  print NAME's Confluent-compatible URL
#   registry.sh java                      print the Java it runs on (fails if there is none >= 21)
#
# Apicurio Registry 3.3 is compiled for Java 21 (class file 65): on Java 17 it stops at start with
# UnsupportedClassVersionError. The script takes the first Java >= 21 it finds: $REGISTRY_JAVA,
# then JDKs under /usr/lib/jvm, then `java` on the PATH.
# State: ${STRAIT_REGISTRY_DIR:-/tmp/strait-registry}/NAME/ (pid, stdout.log, url).
set -euo pipefail

VERSION=3.3.3
IMPORT_MODULE=github.com/axonops/axonops-schema-registry
IMPORT_VERSION=v0.2.1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=go-module.sh
source "$HERE/go-module.sh"
CACHE=${STRAIT_CACHE:-$HOME/.cache/strait}/apicurio-registry-$VERSION
IMPORT_BIN=${STRAIT_CACHE:-$HOME/.cache/strait}/axonops-schema-registry-$IMPORT_VERSION/schema-registry
STATE=${STRAIT_REGISTRY_DIR:-/tmp/strait-registry}
START_TIMEOUT=${STRAIT_REGISTRY_START_TIMEOUT:-90}

log() { echo "registry.sh: $*" >&2; }
die() { log "$*"; exit 1; }
usage() { sed -n '9,23s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }

fetch() {
  [[ -f $CACHE/.complete ]] && return 0
  command -v mvn >/dev/null || die "mvn not found (needed once to fetch Apicurio Registry $VERSION)"
  mkdir -p "$CACHE"
  local lock tmp
  exec {lock}>"$CACHE.lock"
  flock "$lock"
  if [[ ! -f $CACHE/.complete ]]; then
    tmp=$(mktemp -d "$CACHE.tmp.XXXX")
    log "fetching Apicurio Registry $VERSION into $CACHE (first run only)"
    # The `all` assembly is served as tar.gz only.
    if ! mvn -B org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
        -Dartifact="io.apicurio:apicurio-registry-app:$VERSION:tar.gz:all" \
        -DoutputDirectory="$tmp" >"$tmp/fetch.log" 2>&1; then
      grep -E 'ERROR|FAIL' "$tmp/fetch.log" | head -n 20 >&2 || true
      die "mvn failed to fetch Apicurio Registry $VERSION (full output: $tmp/fetch.log)"
    fi
    tar -xzf "$tmp"/apicurio-registry-app-*.tar.gz -C "$tmp"
    rm -f "$tmp"/apicurio-registry-app-*.tar.gz
    [[ -f $tmp/quarkus-run.jar ]] || die "the assembly has no quarkus-run.jar ($tmp)"
    rm -rf "$CACHE" && mv "$tmp" "$CACHE"
    touch "$CACHE/.complete"
  fi
  exec {lock}>&-
}

fetch_import() { go_module_build "$IMPORT_MODULE" "$IMPORT_VERSION" ./cmd/schema-registry "$IMPORT_BIN"; }

java_major() { "$1" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1; }

find_java() {
  local j
  for j in ${REGISTRY_JAVA:-} /usr/lib/jvm/*/bin/java "$(command -v java || true)"; do
    [[ -n $j && -x $j ]] || continue
    if (( $(java_major "$j" || echo 0) >= 21 )); then echo "$j"; return 0; fi
  done
  die "Apicurio Registry $VERSION needs Java 21 or newer and none was found (set REGISTRY_JAVA, or install openjdk-21-jre-headless)"
}

check_name() { [[ ${1-} =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || die "bad registry name '${1-}'"; }

alive() { [[ -f $1/pid ]] && kill -0 "$(<"$1/pid")" 2>/dev/null; }

# Waits for the registry in $dir to answer at $url; its URL on stdout.
await_start() {
  local name=$1 dir=$2 url=$3 tls=${4-} deadline=$((SECONDS + START_TIMEOUT)) code
  while ((SECONDS < deadline)); do
    alive "$dir" || { tail -n 30 "$dir/stdout.log" >&2; die "registry $name exited at start (log: $dir/stdout.log)"; }
    code=$(curl -s ${tls:+--cacert "$dir/ca.pem"} -o /dev/null -w '%{http_code}' "$url/subjects" || true)
    # 401 is an answer too: the registry is up and asks for credentials.
    if [[ $code == 200 || $code == 401 ]]; then echo "$url"; return 0; fi
    sleep 0.5
  done
  tail -n 30 "$dir/stdout.log" >&2
  cmd_stop "$name"
  die "registry $name did not answer on $url within ${START_TIMEOUT}s (log: $dir/stdout.log)"
}

# Whether a registry already runs in $dir at $url (then its URL on stdout).
running() {
  alive "$1" || return 1
  [[ $(<"$1/url") == "$2" ]] || die "registry $(basename "$1") already runs at $(<"$1/url")"
  echo "$2"
}

cmd_start_import() {
  (($# == 2)) || usage
  local name=$1 port=$2 dir url
  check_name "$name"
  dir=$STATE/$name
  url="http://127.0.0.1:$port"
  running "$dir" "$url" && return 0
  fetch_import
  mkdir -p "$dir"
  log "starting IMPORT-capable registry $name on $url"
  SCHEMA_REGISTRY_HOST=127.0.0.1 SCHEMA_REGISTRY_PORT=$port SCHEMA_REGISTRY_STORAGE_TYPE=memory \
    SCHEMA_REGISTRY_LOG_LEVEL=warn setsid "$IMPORT_BIN" >"$dir/stdout.log" 2>&1 </dev/null &
  echo $! >"$dir/pid"
  echo "$url" >"$dir/url"
  await_start "$name" "$dir" "$url"
}

cmd_start() {
  local tls=
  [[ ${1-} == --import ]] && { shift; cmd_start_import "$@"; return; }
  [[ ${1-} == --tls ]] && { tls=1; shift; }
  (($# == 2 || $# == 3)) || usage
  local name=$1 port=$2 auth=${3-} dir java url
  check_name "$name"
  dir=$STATE/$name
  url="http${tls:+s}://127.0.0.1:$port/apis/ccompat/v7"
  running "$dir" "$url" && return 0
  fetch
  java=$(find_java)
  mkdir -p "$dir"
  local props=(-Dquarkus.http.port="$port" -Dquarkus.http.host=127.0.0.1
    -Dapicurio.storage.kind=sql -Dapicurio.storage.sql.kind=h2
    -Dquarkus.management.port=0 -Dquarkus.management.host=127.0.0.1
    -Dquarkus.otel.sdk.disabled=true -Dquarkus.log.level=WARN)
  if [[ -n $tls ]]; then
    # A CA of its own signs the registry's certificate: clients trust ca.pem, nothing else.
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=strait-test-ca" \
      -keyout "$dir/ca-key.pem" -out "$dir/ca.pem" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$dir/key.pem" -out "$dir/req.pem" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$dir/san.ext"
    openssl x509 -req -in "$dir/req.pem" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" -CAcreateserial -days 30 \
      -extfile "$dir/san.ext" -out "$dir/cert.pem" 2>/dev/null
    props=("${props[@]/-Dquarkus.http.port=$port/-Dquarkus.http.ssl-port=$port}")
    props+=(-Dquarkus.http.port=0 -Dquarkus.http.insecure-requests=disabled
      -Dquarkus.http.ssl.certificate.files="$dir/cert.pem" -Dquarkus.http.ssl.certificate.key-files="$dir/key.pem")
  fi
  if [[ -n $auth ]]; then
    # Quarkus's own users from properties: every API call needs HTTP basic auth.
    props+=(-Dquarkus.http.auth.basic=true
      -Dquarkus.security.users.embedded.enabled=true
      -Dquarkus.security.users.embedded.plain-text=true
      "-Dquarkus.security.users.embedded.users.${auth%%:*}=${auth#*:}"
      -Dquarkus.http.auth.permission.apis.paths=/apis/*
      -Dquarkus.http.auth.permission.apis.policy=authenticated)
  fi
  log "starting registry $name on $url (Java: $java)"
  # The whole registry in ~300 MiB: it holds a few hundred schemas at most here.
  setsid "$java" -Xmx384m "${props[@]}" -jar "$CACHE/quarkus-run.jar" >"$dir/stdout.log" 2>&1 </dev/null &
  echo $! >"$dir/pid"
  echo "$url" >"$dir/url"
  await_start "$name" "$dir" "$url" "$tls"
}

cmd_stop() {
  (($# == 1)) || usage
  local dir=$STATE/$1 pid i
  check_name "$1"
  alive "$dir" || { rm -f "$dir/pid"; return 0; }
  pid=$(<"$dir/pid")
  kill "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$dir/pid"
}

main() {
  local cmd=${1-}; shift || true
  case $cmd in
    fetch) fetch; fetch_import ;;
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    stop-all) for d in "$STATE"/*/; do [[ -d $d ]] && cmd_stop "$(basename "$d")"; done ;;
    url) check_name "${1-}"; cat "$STATE/$1/url" ;;
    java) find_java ;;
    *) usage ;;
  esac
}

main "$@"
