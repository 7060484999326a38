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
