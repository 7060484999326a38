#!/usr/bin/env bash
# scripts/serdes.sh - real Confluent-format serializers for the schema tests: confluent-kafka's
# Python client (its Avro and Protobuf serializers and schema registry client) at a pinned version, in a venv
# of its own. Installs once; then runs tests/serdes/TOOL.py with the arguments given.
#
# Usage: serdes.sh TOOL [ARGS...]     e.g. serdes.sh avro_tool produce 127.0.0.1:19092 URL topic 1 0 10
set -euo pipefail
REQUIREMENT="confluent-kafka[avro,protobuf,schemaregistry]==2.16.1"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# A changed requirement gets a venv of its own.
VENV=${STRAIT_CACHE:-$HOME/.cache/strait}/serdes-venv-$(echo "$REQUIREMENT" | sha256sum | cut -c1-12)
if [[ ! -x $VENV/bin/python || ! -f $VENV/.complete ]]; then
  command -v python3 >/dev/null || { echo "serdes.sh: python3 not found (needed for the schema tests' serializers)" >&2; exit 1; }
  exec {lock}>"$VENV.lock"; flock "$lock"
  if [[ ! -f $VENV/.complete ]]; then
    echo "serdes.sh: installing $REQUIREMENT into $VENV (first run only)" >&2
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "$REQUIREMENT" >&2
    touch "$VENV/.complete"
  fi
fi
tool=$1; shift
# A serializer that hangs fails the test instead of holding it.
exec timeout 300 "$VENV/bin/python" "$HERE/../tests/serdes/$tool.py" "$@"
