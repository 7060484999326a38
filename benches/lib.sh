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
