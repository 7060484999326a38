#!/usr/bin/env bash
# scripts/kafka.sh - real Apache Kafka (KRaft) clusters on loopback for strait's
# tests: no Docker, just the Maven Central jars and `java`.
#
# Usage:
#   kafka.sh fetch                                  download the Kafka jars into the cache (idempotent)
#   kafka.sh start [--fresh] [--authorizer] [--security sasl_ssl|mtls] [--wan] NAME BROKERS BASEPORT
#                                                   start cluster NAME (or FRESH=1); last stdout line = bootstrap
#   kafka.sh stop NAME                              stop NAME's nodes (TERM, then KILL after 20 s); no-op if stopped
#   kafka.sh stop-all                               stop every cluster under the state dir
#   kafka.sh bootstrap NAME                         print NAME's bootstrap servers (127.0.0.1:p1,127.0.0.1:p2,...)
#   kafka.sh internal NAME                          print NAME's PLAINTEXT bootstrap (the same as bootstrap unless --security)
#   kafka.sh pids NAME [NODE]                       print live node pids, one per line, in node order
#   kafka.sh status                                 every cluster, its bootstrap and which nodes are alive
#   kafka.sh wipe NAME                              stop NAME and delete its state dir
#   kafka.sh tool CLASS [ARGS...]                   run a Java main class on the Kafka classpath (logs: WARN, stderr)
#   kafka.sh topics NAME [ARGS...]                  TopicCommand --bootstrap-server <NAME's bootstrap> ARGS...
#   kafka.sh mm2 PROPS_FILE                         MirrorMaker 2 dedicated mode, in the foreground
#
# Layout: broker i listens on 127.0.0.1:BASEPORT+i; node 0 also runs the
# controller on 127.0.0.1:BASEPORT+100. State lives in
# ${STRAIT_KAFKA_DIR:-/tmp/strait-kafka}/NAME/node-i/ (server.properties, data/,
# broker.log, stdout.log, pid); jars in ${STRAIT_CACHE:-~/.cache/strait}/kafka-VERSION/libs.
# --authorizer: KRaft's StandardAuthorizer on every node, with super.users=User:ANONYMOUS; all
# listeners are PLAINTEXT, so every client, broker and controller is ANONYMOUS and keeps full
# access, while ACLs can be created, described, and are enforced for other principals. It is part
# of the cluster's saved settings (cluster.conf): restarts keep it, and a start with the other
# choice is refused until --fresh.
# --security sasl_ssl|mtls: the client listener (BASEPORT+i, what `bootstrap` prints) speaks
# SASL_SSL with SCRAM-SHA-512, or SSL with required client certificates. Brokers talk to each
# other, and the tests' own tools to the brokers, on a PLAINTEXT listener at BASEPORT+50+i
# (`internal`). Certificates and passwords are made at the cluster's creation, with openssl and
# keytool, in NAME/secrets/ (see make_secrets): nothing secret is committed.
# --wan: the client listener (BASEPORT+i) is advertised at BASEPORT+200+i, where scripts/wan.sh
# puts a fault proxy in front of it, so every client connection crosses the proxy's link, the
# metadata's broker addresses included (`bootstrap` prints the proxy's ports). Brokers talk to
# each other, and the tests' own tools to the brokers, on PLAINTEXT at BASEPORT+50+i (`internal`).
# Environment: EXTRA_BROKER_PROPS (newline-separated key=value, appended to every
# node's server.properties), FRESH=1, STRAIT_KAFKA_START_TIMEOUT (seconds, default 90),
# STRAIT_LOG_LEVEL (tool/topics default WARN, mm2 INFO), JAVA (java binary).
#
# KRaft layout: node 0 is `broker,controller` and the only voter of a dynamic
# quorum (controller.quorum.bootstrap.servers + `format --standalone`); the
# other nodes are pure brokers. One controller JVM instead of three saves
# memory; the price is that while node 0 is down or SIGSTOPped nothing in the
# cluster's metadata can change (no leader election, no ISR shrink), so tests
# that take a broker away should pick node 1 or higher.
set -euo pipefail

KAFKA_VERSION=4.3.1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
POM=$HERE/kafka/pom.xml
BROKER_LOG4J=$HERE/kafka/log4j2.properties
CONSOLE_LOG4J=$HERE/kafka/log4j2-console.properties
CACHE=${STRAIT_CACHE:-$HOME/.cache/strait}/kafka-$KAFKA_VERSION
LIBS=$CACHE/libs
STATE=${STRAIT_KAFKA_DIR:-/tmp/strait-kafka}
JAVA=${JAVA:-java}
START_TIMEOUT=${STRAIT_KAFKA_START_TIMEOUT:-90}
STOP_TIMEOUT=20

# All chatter goes to stderr: callers take the bootstrap from stdout.
log() { echo "kafka.sh: $*" >&2; }
die() { log "$*"; exit 1; }
usage() { sed -n '5,18s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }

# ---------------------------------------------------------------- fetch
fetch() {
  local want
  # The pom's hash is part of the marker so editing the pom re-resolves.
  want="kafka=$KAFKA_VERSION pom=$(sha256sum "$POM" | cut -d' ' -f1)"
  [[ -f $LIBS/.complete && $(<"$LIBS/.complete") == "$want" ]] && return 0
  command -v mvn >/dev/null || die "mvn not found (needed once to fetch Kafka $KAFKA_VERSION)"
  mkdir -p "$CACHE"
  local lock
  # Two clusters are often started in parallel on a fresh machine.
  exec {lock}>"$CACHE/.fetch.lock"
  flock "$lock"
  if [[ ! -f $LIBS/.complete || $(<"$LIBS/.complete") != "$want" ]]; then
    local tmp=$CACHE/libs.tmp.$$
    rm -rf "$tmp"
    log "fetching Kafka $KAFKA_VERSION jars into $LIBS (first run only)"
    # Copy to a scratch dir and swap it in, so an interrupted or changed
    # resolution never leaves a mix of old and new jars (e.g. two slf4j-api).
    if ! mvn -B -f "$POM" -Dkafka.version="$KAFKA_VERSION" \
        org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$tmp" >"$CACHE/fetch.log" 2>&1; then
      grep -E 'ERROR|FAIL' "$CACHE/fetch.log" | head -n 20 >&2 || true
      rm -rf "$tmp"; die "mvn failed to fetch Kafka $KAFKA_VERSION (full output: $CACHE/fetch.log)"
    fi
    compgen -G "$tmp/slf4j-api-2.*.jar" >/dev/null ||
      { rm -rf "$tmp"; die "resolved slf4j-api is not 2.x; log4j-slf4j2-impl would log nothing"; }
    echo "$want" >"$tmp/.complete"
    rm -rf "$LIBS" && mv "$tmp" "$LIBS"
  fi
  exec {lock}>&-
}

# The java command line for foreground tools: console (stderr) logging, so a
# tool's real output on stdout stays parseable. Use as "${TOOL_JAVA[@]}" CLASS ARGS.
# Extra arguments are JVM flags (QUICK_JVM for our own short-lived helpers); they come after
# the default heap, so a -Xmx among them wins.
tool_java() {
  TOOL_JAVA=("$JAVA" -Xmx512m "$@" -Djava.awt.headless=true
    -Dlog4j2.configurationFile="$CONSOLE_LOG4J" -Dstrait.log.level="${STRAIT_LOG_LEVEL:-WARN}"
    -cp "$LIBS/*")
}
# C1-only JIT and serial GC start ~35% faster; fine for a JVM that lives 1 s.
QUICK_JVM=(-XX:TieredStopAtLevel=1 -XX:+UseSerialGC)
# exec, so whoever started kafka.sh can signal the JVM itself via that pid.
exec_java() { tool_java; exec "${TOOL_JAVA[@]}" "$@"; }

# ---------------------------------------------------------------- helpers
check_name() { [[ ${1-} =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || die "bad cluster name '${1-}'"; }
cluster_dir() { check_name "$1"; echo "$STATE/$1"; }
node_dirs() { compgen -G "$1/node-*" | sort -V || true; }

# Echo the pid recorded for a node dir iff that pid is still the java process
# we started on this node's server.properties; a recycled pid never matches.
node_pid() {
  local dir=$1 pid args
  [[ -f $dir/pid ]] || return 1
  pid=$(<"$dir/pid")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  mapfile -d '' args 2>/dev/null <"/proc/$pid/cmdline" || return 1
  # A zombie has an empty cmdline, so it counts as dead too.
  (( ${#args[@]} > 0 )) || return 1
  [[ ${args[0]##*/} == java && ${args[-1]} == "$dir/server.properties" ]] || return 1
  echo "$pid"
}

bootstrap_of() {
  local cdir; cdir=$(cluster_dir "$1")
  [[ -f $cdir/bootstrap ]] || die "cluster '$1' was never started (no $cdir/bootstrap)"
  cat "$cdir/bootstrap"
}

# ---------------------------------------------------------------- start
write_props() {
  local dir=$1 i=$2 brokers=$3 baseport=$4 authorizer=$5 security=${6-} wan=${7-}
  local port=$((baseport + i)) cport=$((baseport + 100))
  local rf=$((brokers < 3 ? brokers : 3)) isr=$((brokers < 2 ? brokers : 2))
  local roles=broker listeners="PLAINTEXT://127.0.0.1:$port" protocols=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
  local advertised=
  if [[ -n $security || -n $wan ]]; then
    listeners="CLIENT://127.0.0.1:$port,PLAINTEXT://127.0.0.1:$((port + 50))"
    protocols+=",CLIENT:$([[ $security == mtls ]] && echo SSL || { [[ -n $security ]] && echo SASL_SSL || echo PLAINTEXT; })"
  fi
  [[ -z $wan ]] || advertised="advertised.listeners=CLIENT://127.0.0.1:$((port + 200)),PLAINTEXT://127.0.0.1:$((port + 50))"
  if ((i == 0)); then roles=broker,controller; listeners+=",CONTROLLER://127.0.0.1:$cport"; fi
  cat >"$dir/server.properties" <<EOF
# Generated by scripts/kafka.sh on every (re)start; edit EXTRA_BROKER_PROPS instead.
process.roles=$roles
node.id=$i
controller.quorum.bootstrap.servers=127.0.0.1:$cport
controller.listener.names=CONTROLLER
listeners=$listeners
$advertised
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protocols
log.dirs=$dir/data
# Tests create every topic explicitly, with the partition count they mean.
auto.create.topics.enable=false
num.partitions=1
default.replication.factor=$rf
offsets.topic.replication.factor=$rf
# 50 partitions (the default) makes the first consumer group slow to start.
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=10
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
group.initial.rebalance.delay.ms=0
log.segment.bytes=16777216
# The compacted-source test needs the cleaner to look often (the default is every 15 s).
log.cleaner.backoff.ms=1000
EOF
  if ((authorizer)); then
    cat >>"$dir/server.properties" <<EOF
# start --authorizer: ACLs are enforced; ANONYMOUS (every PLAINTEXT client, broker and controller) may do anything.
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
EOF
  fi
  [[ -z $security ]] || security_props "$(dirname "$dir")/secrets" "$security" >>"$dir/server.properties"
  [[ -z ${EXTRA_BROKER_PROPS-} ]] || printf '%s\n' "$EXTRA_BROKER_PROPS" >>"$dir/server.properties"
}

# The broker side of --security: its key store, the CA it trusts for client certificates, and
# SCRAM-SHA-512 (whose users are made at format time, see cmd_start) or required client certs.
security_props() {
  local d=$1 security=$2
  cat <<EOF
# start --security $security: the CLIENT listener; secrets in $d.
listener.name.client.ssl.keystore.type=PKCS12
listener.name.client.ssl.keystore.location=$d/broker.p12
listener.name.client.ssl.keystore.password=$(<"$d/store.password")
listener.name.client.ssl.truststore.type=PEM
listener.name.client.ssl.truststore.location=$d/ca.pem
EOF
  if [[ $security == mtls ]]; then
    echo "listener.name.client.ssl.client.auth=required"
  else
    echo "sasl.enabled.mechanisms=SCRAM-SHA-512"
    echo "listener.name.client.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;"
  fi
}

# One certificate signed by the cluster's CA: NAME.key, NAME.pem, and NAME.p12 (its key store,
# with the chain).
sign_cert() {
  local d=$1 key=$2 subject=$3 ext=${4-}
  openssl req -newkey rsa:2048 -nodes -keyout "$d/$key.key" -out "$d/$key.csr" -subj "$subject" 2>/dev/null
  openssl x509 -req -in "$d/$key.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial -days 30 \
    ${ext:+-extfile "$ext"} -out "$d/$key.pem" 2>/dev/null
  openssl pkcs12 -export -in "$d/$key.pem" -inkey "$d/$key.key" -certfile "$d/ca.pem" -name "$key" \
    -out "$d/$key.p12" -passout "pass:$(<"$d/store.password")"
}

# Everything secret a --security cluster and its tests use, made once when the cluster is
# created (a restart keeps them):
#   ca.pem ca.key          the cluster's own CA
#   broker.*               the brokers' certificate (127.0.0.1 and localhost); broker.p12 its key store
#   client.*               a client certificate (CN=strait) for mtls; client.p12 its key store
#   expired.*              a client certificate that expired in 2020, signed by the same CA
#   other-ca.pem           a CA nobody here trusts (to make the brokers' certificate untrusted)
#   truststore.p12 / .jks  ca.pem in a Java trust store, PKCS#12 and JKS
#   store.password         the password of every store above
#   sasl.password          the SCRAM-SHA-512 password of user `strait` (sasl_ssl)
make_secrets() {
  local d=$1 pw type
  command -v openssl >/dev/null || die "openssl not found (needed to make the certificates of --security)"
  command -v keytool >/dev/null || die "keytool not found (it comes with the JDK; needed for --security)"
  rm -rf "$d" && mkdir -p "$d" && chmod 700 "$d"
  head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$d/store.password"
  head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$d/sasl.password"
  pw=$(<"$d/store.password")
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.pem" -days 30 -subj "/CN=strait test CA" 2>/dev/null
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/other-ca.key" -out "$d/other-ca.pem" -days 30 \
    -subj "/CN=a CA nobody trusts" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$d/broker.ext"
  sign_cert "$d" broker /CN=localhost "$d/broker.ext"
  sign_cert "$d" client /CN=strait
  # `openssl x509` cannot back-date a certificate; `openssl ca` can.
  printf '[ca]\ndefault_ca=test\n[test]\ndatabase=%s/index.txt\nnew_certs_dir=%s\nserial=%s/serial\ndefault_md=sha256\npolicy=any\n[any]\ncommonName=supplied\n' \
    "$d" "$d" "$d" >"$d/ca.cnf"
  : >"$d/index.txt"; echo 01 >"$d/serial"
  openssl req -newkey rsa:2048 -nodes -keyout "$d/expired.key" -out "$d/expired.csr" -subj /CN=strait 2>/dev/null
  openssl ca -batch -notext -config "$d/ca.cnf" -cert "$d/ca.pem" -keyfile "$d/ca.key" -in "$d/expired.csr" \
    -startdate 20200101000000Z -enddate 20200201000000Z -out "$d/expired.pem" 2>/dev/null
  openssl pkcs12 -export -in "$d/expired.pem" -inkey "$d/expired.key" -certfile "$d/ca.pem" -name expired \
    -out "$d/expired.p12" -passout "pass:$pw"
  for type in PKCS12 JKS; do
    keytool -importcert -noprompt -alias ca -file "$d/ca.pem" -storetype $type -storepass "$pw" \
      -keystore "$d/truststore.$([[ $type == JKS ]] && echo jks || echo p12)" >/dev/null 2>&1
  done
  [[ -s $d/truststore.p12 && -s $d/truststore.jks && -s $d/expired.p12 && -s $d/client.p12 && -s $d/broker.p12 ]] ||
    die "making the certificates in $d failed"
}

launch_node() {
  local dir=$1
  rm -f "$dir/pid"
  # setsid: own session, so the broker outlives this script and the caller's
  # terminal/process group. The pid is written by the process that then execs
  # java, so it is java's pid even if setsid had to fork. Inherited fds > 2 are
  # closed: a broker holding our lock fd (or a caller's pipe) would block the
  # next start/stop or a caller waiting for EOF.
  setsid bash -c 'echo $$ >"$0"
    for fd in /proc/$$/fd/*; do fd=${fd##*/}; ((fd > 2)) && eval "exec $fd>&-"; done 2>/dev/null
    exec "$@"' "$dir/pid" \
    "$JAVA" -Xms128m -Xmx512m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$BROKER_LOG4J" -Dstrait.log.file="$dir/broker.log" \
    -cp "$LIBS/*" kafka.Kafka "$dir/server.properties" \
    </dev/null >>"$dir/stdout.log" 2>&1 &
  local t
  for t in {1..50}; do [[ -s $dir/pid ]] && return 0; sleep 0.1; done
  die "node in $dir did not record its pid"
}

dump_logs() {
  local dir
  for dir in $(node_dirs "$1"); do
    # Errors first: the plain tail is often just the stack trace of the last one.
    log "---- ${dir#"$STATE"/}: errors, then tails of broker.log and stdout.log"
    grep -E '^\[[^]]*\] (ERROR|FATAL)' "$dir/broker.log" 2>/dev/null | tail -n 5 >&2 || true
    tail -n 20 "$dir/broker.log" >&2 2>/dev/null || true
    tail -n 5 "$dir/stdout.log" >&2 2>/dev/null || true
  done
}

# Stops only the nodes this invocation launched (STARTED): the others may be
# SIGSTOPped on purpose by a test, which is also a likely reason for the failure.
abort_start() {
  dump_logs "$1"
  local d brokers=()
  for d in "${STARTED[@]}"; do [[ $d == */node-0 ]] || brokers+=("$d"); done
  ((${#brokers[@]} == 0)) || stop_dirs 5 "${brokers[@]}"
  [[ " ${STARTED[*]} " != *" $1/node-0 "* ]] || stop_dirs "$STOP_TIMEOUT" "$1/node-0"
  die "$2; stopped the nodes started now, logs are in $1"
}

# Ready = every broker is registered, unfenced and answering, as seen by a
# real client (BrokerApiVersionsCommand prints one "(id: N ...)" per broker).
wait_ready() {
  local name=$1 cdir=$2 brokers=$3 baseport=$4 bs deadline=$((SECONDS + START_TIMEOUT)) n dir port
  bs=$(main internal "$name")
  while :; do
    for dir in $(node_dirs "$cdir"); do
      node_pid "$dir" >/dev/null || abort_start "$cdir" "${dir#"$STATE"/} exited during start-up"
    done
    # Cheap port probe first: a JVM-based probe costs a second or two each.
    n=0
    for ((port = baseport; port < baseport + brokers; port++)); do
      (: </dev/tcp/127.0.0.1/$port) 2>/dev/null && n=$((n + 1))
    done
    if ((n == brokers)); then
      STRAIT_LOG_LEVEL=ERROR tool_java "${QUICK_JVM[@]}"
      n=$(timeout 20 "${TOOL_JAVA[@]}" org.apache.kafka.tools.BrokerApiVersionsCommand \
        --bootstrap-server "$bs" 2>/dev/null | grep -c '(id: ' || true)
      ((n >= brokers)) && return 0
    fi
    if ((SECONDS >= deadline)); then
      abort_start "$cdir" "cluster '$name' not ready after ${START_TIMEOUT}s ($n/$brokers brokers)"
    fi
    sleep 1
  done
}

# The saved settings of a cluster: "BROKERS BASEPORT", plus " authorizer" with --authorizer,
# " sasl_ssl" or " mtls" with --security, and " wan" with --wan (so clusters made before those
# options match).
cluster_conf() { echo "$1 $2${3:+ authorizer}${4:+ $4}${5:+ wan}"; }

cmd_start() {
  local fresh=${FRESH:-0} authorizer= security= wan=
  while [[ ${1-} == --* ]]; do
    case $1 in
      --fresh) fresh=1 ;;
      --authorizer) authorizer=1 ;;
      --wan) wan=1 ;;
      --security)
        [[ ${2-} == sasl_ssl || ${2-} == mtls ]] || die "--security takes sasl_ssl or mtls, not '${2-}'"
        security=$2; shift ;;
      *) usage ;;
    esac
    shift
  done
  (($# == 3)) || usage
  [[ -z $wan || -z $security ]] || die "--wan and --security do not go together yet"
  local name=$1 brokers=$2 baseport=$3 cdir conf
  cdir=$(cluster_dir "$name")
  [[ $brokers =~ ^[1-9][0-9]?$ && $baseport =~ ^[1-9][0-9]{2,4}$ ]] || die "bad BROKERS/BASEPORT: $brokers $baseport"
  ((baseport + 200 + brokers <= 65535)) || die "BASEPORT too high"
  conf=$(cluster_conf "$brokers" "$baseport" "$authorizer" "$security" "$wan")
  fetch
  if [[ $fresh == 1 ]]; then do_stop "$name"; rm -rf "$cdir"; fi

  if [[ -f $cdir/cluster.conf ]]; then
    [[ $(<"$cdir/cluster.conf") == "$conf" ]] ||
      die "cluster '$name' exists as '$(<"$cdir/cluster.conf")' (BROKERS BASEPORT [authorizer] [security]), not '$conf'; use start --fresh to recreate it"
  else
    mkdir -p "$cdir"
    # A Kafka cluster id is 16 random bytes, base64url without padding; ids
    # starting with '-' are avoided (they read as options on command lines).
    local id=-
    while [[ $id == -* ]]; do id=$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '='); done
    echo "$id" >"$cdir/cluster.id"
    local i bs= internal= shift=0 front=0
    [[ -z $security && -z $wan ]] || shift=50
    [[ -z $wan ]] || front=200
    for ((i = 0; i < brokers; i++)); do
      bs+="${bs:+,}127.0.0.1:$((baseport + front + i))"
      internal+="${internal:+,}127.0.0.1:$((baseport + shift + i))"
    done
    [[ -z $security ]] || make_secrets "$cdir/secrets"
    echo "$bs" >"$cdir/bootstrap"
    echo "$internal" >"$cdir/internal"
    echo "$conf" >"$cdir/cluster.conf"
  fi

  local i dir all_up=1
  STARTED=()
  for ((i = 0; i < brokers; i++)); do
    node_pid "$cdir/node-$i" >/dev/null || { all_up=0; break; }
  done
  if ((all_up)); then log "cluster '$name' already running"; bootstrap_of "$name"; return 0; fi

  local t0=$SECONDS
  for ((i = 0; i < brokers; i++)); do
    dir=$cdir/node-$i
    node_pid "$dir" >/dev/null && continue
    mkdir -p "$dir/data"
    write_props "$dir" "$i" "$brokers" "$baseport" "${authorizer:-0}" "$security" "$wan"
    # Format only never-formatted nodes: a restart must keep its data.
    if [[ ! -f $dir/data/meta.properties ]]; then
      local extra=()
      ((i == 0)) && extra=(--standalone)
      [[ $security != sasl_ssl ]] || extra+=(--add-scram "SCRAM-SHA-512=[name=strait,password=$(<"$cdir/secrets/sasl.password")]")
      tool_java "${QUICK_JVM[@]}"
      "${TOOL_JAVA[@]}" kafka.tools.StorageTool format --cluster-id "$(<"$cdir/cluster.id")" \
        --config "$dir/server.properties" "${extra[@]}" >>"$dir/stdout.log" 2>&1 ||
        { tail -n 20 "$dir/stdout.log" >&2; die "formatting $dir failed"; }
    fi
    launch_node "$dir"
    STARTED+=("$dir")
  done
  log "cluster '$name': started ${STARTED[*]##*/}; waiting for $brokers brokers"
  wait_ready "$name" "$cdir" "$brokers" "$baseport"
  log "cluster '$name' ready in $((SECONDS - t0))s"
  bootstrap_of "$name"
}

# ---------------------------------------------------------------- stop
# TERM (after CONT, so a SIGSTOPped node can act on it), wait, then KILL.
stop_dirs() {
  local grace=$1 dir pid deadline left; shift
  local -A pids=()
  for dir in "$@"; do
    if pid=$(node_pid "$dir"); then
      pids[$dir]=$pid
      kill -CONT "$pid" 2>/dev/null || true
      kill -TERM "$pid" 2>/dev/null || true
    else
      rm -f "$dir/pid"
    fi
  done
  deadline=$((SECONDS + grace))
  while :; do
    left=0
    for dir in "${!pids[@]}"; do
      if node_pid "$dir" >/dev/null; then left=1; else rm -f "$dir/pid"; unset "pids[$dir]"; fi
    done
    ((left)) || return 0
    ((SECONDS < deadline)) || break
    sleep 0.2
  done
  for dir in "${!pids[@]}"; do
    # Re-verify right before KILL: the pid must still be our java.
    if pid=$(node_pid "$dir"); then
      log "${dir#"$STATE"/} still running ${grace}s after SIGTERM; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  for dir in "${!pids[@]}"; do
    local t
    for t in {1..50}; do node_pid "$dir" >/dev/null || break; sleep 0.1; done
    rm -f "$dir/pid"
  done
}

do_stop() {
  local cdir dirs=() dir pid
  cdir=$(cluster_dir "$1")
  [[ -d $cdir ]] || return 0
  for dir in $(node_dirs "$cdir"); do
    # Wake every node first: a broker's controlled shutdown stalls while the
    # controller (node 0) is still SIGSTOPped.
    pid=$(node_pid "$dir") && kill -CONT "$pid" 2>/dev/null || true
    [[ $dir == */node-0 ]] || dirs+=("$dir")
  done
  # Pure brokers first: their controlled shutdown needs the controller (node 0).
  # With node 0 already dead they would wait for it for minutes, and KILL
  # loses nothing the page cache holds, so they get a short grace then.
  local grace=$STOP_TIMEOUT
  node_pid "$cdir/node-0" >/dev/null || grace=5
  ((${#dirs[@]} == 0)) || stop_dirs "$grace" "${dirs[@]}"
  [[ ! -d $cdir/node-0 ]] || stop_dirs "$STOP_TIMEOUT" "$cdir/node-0"
}

# ---------------------------------------------------------------- the rest
cmd_status() {
  local cdir dir pid st line
  for cdir in $(compgen -G "$STATE/*/" | sort); do
    cdir=${cdir%/}
    [[ -f $cdir/cluster.conf ]] || continue
    line="${cdir##*/} $(cat "$cdir/bootstrap" 2>/dev/null)"
    for dir in $(node_dirs "$cdir"); do
      if pid=$(node_pid "$dir"); then
        # Field 3 of /proc/PID/stat is the state; T = stopped (SIGSTOP).
        st=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || echo ?)
        [[ $st == T ]] && st=stopped || st=alive
        line+=" ${dir##*/}=$st($pid)"
      else
        line+=" ${dir##*/}=dead"
      fi
    done
    echo "$line"
  done
}

cmd_pids() {
  local cdir dir
  cdir=$(cluster_dir "$1")
  if [[ -n ${2-} ]]; then
    [[ -d $cdir/node-$2 ]] || die "no node $2 in '$1'"
    node_pid "$cdir/node-$2" || die "node $2 of '$1' is not running"
    return 0
  fi
  for dir in $(node_dirs "$cdir"); do node_pid "$dir" || true; done
}

# Serialises start/stop/wipe of one cluster; the lock sits beside the cluster
# dir so wipe can delete the dir while holding it.
lock_cluster() {
  check_name "$1"
  mkdir -p "$STATE"
  exec {CLUSTER_LOCK}>"$STATE/.$1.lock"
  flock "$CLUSTER_LOCK"
}

main() {
  local cmd=${1-}
  (($#)) && shift
  case $cmd in
    fetch) fetch ;;
    start)
      local n=${1-} a
      # The name is the first argument that is not an option.
      for a in "$@"; do [[ $a == --* ]] || { n=$a; break; }; done
      lock_cluster "$n"; cmd_start "$@" ;;
    stop)
      (($# == 1)) || usage; check_name "$1"; [[ -d $STATE/$1 ]] || return 0
      lock_cluster "$1"; do_stop "$1" ;;
    stop-all)
      local c
      for c in $(compgen -G "$STATE/*/" | sort); do
        c=${c%/}; c=${c##*/}
        # Subshell: each cluster's lock is released before the next one.
        [[ -f $STATE/$c/cluster.conf ]] && (lock_cluster "$c"; do_stop "$c")
      done ;;
    bootstrap) (($# == 1)) || usage; bootstrap_of "$1" ;;
    internal)
      (($# == 1)) || usage; bootstrap_of "$1" >/dev/null
      # Clusters made before `internal` existed have no such file: their bootstrap is PLAINTEXT.
      cat "$STATE/$1/internal" 2>/dev/null || bootstrap_of "$1" ;;
    pids) (($# == 1 || $# == 2)) || usage; cmd_pids "$@" ;;
    status) cmd_status ;;
    wipe)
      (($# == 1)) || usage; check_name "$1"; [[ -d $STATE/$1 ]] || return 0
      lock_cluster "$1"; do_stop "$1"; rm -rf "$(cluster_dir "$1")" ;;
    tool) (($# >= 1)) || usage; fetch; exec_java "$@" ;;
    topics)
      (($# >= 1)) || usage; fetch
      local bs; bs=$(main internal "$1"); shift
      exec_java org.apache.kafka.tools.TopicCommand --bootstrap-server "$bs" "$@" ;;
    mm2)
      (($# == 1)) || usage; [[ -f $1 ]] || die "no such file: $1"; fetch
      # The heap Kafka's own connect-mirror-maker.sh gives it (KAFKA_HEAP_OPTS).
      STRAIT_LOG_LEVEL=${STRAIT_LOG_LEVEL:-INFO} tool_java -Xms256M -Xmx2G
      exec "${TOOL_JAVA[@]}" org.apache.kafka.connect.mirror.MirrorMaker "$1" ;;
    *) usage ;;
  esac
}

main "$@"
