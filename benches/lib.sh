# Shared by the bench scripts (source it): run a release strait on a config and wait until it
# replicated a number of records, read from its own metrics.

# strait_start CFG PORT: starts strait in the background, metrics on PORT; sets STRAIT_PID.
strait_start() {
  STRAIT_LOG=warn target/release/strait run --config "$1" --metrics-listen "127.0.0.1:$2" 2>/dev/null &
  STRAIT_PID=$!
}

# wait_replicated PORT RECORDS: returns once strait_replication_records_total reaches RECORDS.
wait_replicated() {
  local got=0
  while ((got < $2)); do
    sleep 0.1
    got=$( (curl -s "http://127.0.0.1:$1/metrics" || true) | awk '/^strait_replication_records_total/ {s+=$2} END {printf "%d", s}')
  done
}

# strait_stop: SIGTERM (positions are stored) and wait.
strait_stop() {
  kill -TERM "$STRAIT_PID"
  wait "$STRAIT_PID" || true
}

# load_backlog TOPIC RECORDS SIZE: starts the two bench clusters (sets EAST and WEST), creates
# TOPIC on us-east with 6 partitions and pre-loads RECORDS records of SIZE bytes into it.
load_backlog() {
  EAST=$(scripts/kafka.sh start us-east 3 19092)
  WEST=$(scripts/kafka.sh start us-west 1 29092)
  scripts/kafka.sh topics us-east --create --topic "$1" --partitions 6 --replication-factor 1 >/dev/null
  echo "loading $2 records of $3 B into $1" >&2
  scripts/kafka.sh tool org.apache.kafka.tools.ProducerPerformance --topic "$1" --num-records "$2" --record-size "$3" \
    --throughput -1 --bootstrap-server "$EAST" --command-property acks=1 linger.ms=10 batch.size=262144 >/dev/null
}

metric() { # metric NAME PORT...: the sum of a metric over the processes' endpoints
  local name=$1 port total=0 v
  shift
  for port in "$@"; do
    v=$( (curl -s "http://127.0.0.1:$port/metrics" || true) | awk -v n="$name" '$1 ~ "^"n"({|$)" {s+=$2} END {printf "%d", s}')
    total=$((total + v))
  done
  echo "$total"
}

cpu_ticks() { # cpu_ticks PID...: user + system clock ticks of the processes so far
  local pid total=0
  for pid in "$@"; do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo "$total"
}

# drain BIN LABEL PROCESSES EXTRA: BIN drains the backlog SOURCE (RECORDS records, loaded by
# load_backlog) from EAST to WEST in PROCESSES processes with EXTRA config lines (`@LABEL@` in
# them stands for the run's source alias), and prints
# records/s and CPU per record. The label is the run's source alias: a fresh remote topic,
# position topic and group each, so every run drains the whole backlog.
drain() {
  # The clock starts once the group has settled (each process owns a share of the 6 partitions)
  # and stops when the last record is replicated (exactly-once: committed), so start-up and the
  # group's first rebalance are left out; records/s and CPU/record cover that window only.
  local bin=$1 label=$2 n=$3 extra=${4//@LABEL@/$2} cfg start end ticks0 ticks done0 commits i port
  local -a ports=() pids=()
  cfg=$(mktemp /tmp/strait-bench.XXXXXX.properties)
  # One task per partition of the 6-partition source, so two processes can split them.
  printf 'clusters = %s, us-west\n%s.bootstrap.servers = %s\nus-west.bootstrap.servers = %s\n%s->us-west.enabled = true\n%s->us-west.topics = %s\ntasks.max = 6\n%s\n' \
    "$label" "$label" "$EAST" "$WEST" "$label" "$label" "$SOURCE" "$extra" >"$cfg"
  for ((i = 0; i < n; i++)); do
    ports+=($((20000 + RANDOM % 20000)))
    STRAIT_LOG=warn "$bin" run --config "$cfg" --metrics-listen "127.0.0.1:${ports[$i]}" 2>/dev/null &
    pids+=($!)
  done
  settled() {
    local port
    for port in "${ports[@]}"; do
      (($(metric strait_source_partitions_assigned "$port") >= 1)) || return 1
    done
    (($(metric strait_source_partitions_assigned "${ports[@]}") == 6))
  }
  until settled; do sleep 0.05; done
  start=$(date +%s.%N)
  ticks0=$(cpu_ticks "${pids[@]}")
  done0=$(metric strait_replication_records_total "${ports[@]}")
  while (($(metric strait_replication_records_total "${ports[@]}") < RECORDS)); do sleep 0.05; done
  # Exactly-once: the records count once their transaction commits, which is the next commit
  # (no record is sent while one is under way).
  if [[ $extra == *exactly.once* ]]; then
    commits=$(metric strait_transactions_committed_total "${ports[@]}")
    while (($(metric strait_transactions_committed_total "${ports[@]}") <= commits)); do sleep 0.02; done
  fi
  end=$(date +%s.%N)
  ticks=$(($(cpu_ticks "${pids[@]}") - ticks0))
  kill -TERM "${pids[@]}"
  wait "${pids[@]}" || true
  # Each drain writes the whole backlog again: dropped at once, tens of drains fit the disk.
  scripts/kafka.sh topics us-west --delete --topic "$label.$SOURCE" >/dev/null 2>&1 || true
  awk -v n="$((RECORDS - done0))" -v s="$start" -v e="$end" -v l="$label" -v t="$ticks" -v hz="$(getconf CLK_TCK)" \
    'BEGIN {printf "%-28s %8.0f records/s (%8d records in %6.2f s)  %6.2f µs CPU/record\n", l, n/(e-s), n, e-s, t/hz/n*1e6}'
}
