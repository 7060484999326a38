#!/usr/bin/env bash
# The header-filter policy in Rust, Python and JavaScript, side by side on the same records:
# per-record cost of the record hook on a batch of strait's default size (2,000 records, a
# quarter flagged for dropping, the rest with a JSON field to mask), compile time when strait
# loads the component, and the linear memory an instance holds. Rounds interleave the three
# languages; medians and spread (min-max) over the rounds. No Kafka needed.
#
#   benches/policy-languages.sh [ROUNDS]        (default 5; release strait, built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
[[ -x target/release/strait ]] || cargo build --release
cargo build --release --target wasm32-wasip2 --manifest-path plugins/Cargo.toml -p strait-policy-header-filter >/dev/null 2>&1
scripts/polyglot.sh >/dev/null
records=$(mktemp --suffix .jsonl)
trap 'rm -f "$records"' EXIT
python3 - "$records" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(2000):
        headers = {"trace": f"t{i}"}
        if i % 4 == 0:
            headers["x-strait-drop"] = "yes"
        value = json.dumps({"id": i, "card": f"4111-{i:04}", "amount": i, "note": "x" * 200})
        f.write(json.dumps({"topic": "payments", "key": f"p{i}", "value": value, "headers": headers, "timestamp": i}) + "\n")
PY
declare -A component=(
  [rust]=plugins/target/wasm32-wasip2/release/strait_policy_header_filter.wasm
  [python]=plugins/target/polyglot/python-header-filter.wasm
  [js]=plugins/target/polyglot/js-header-filter.wasm
)
out=$(mktemp)
for ((r = 1; r <= ROUNDS; r++)); do
  for lang in rust python js; do
    line=$(target/release/strait policy test --component "${component[$lang]}" --records "$records" \
      --property replication.policy.header-filter.mask.field=card | sed -n '1p;$p' | tr '\n' ' ')
    echo "$lang $line" >>"$out"
    echo "round $r $lang: $line" >&2
  done
done
python3 - "$out" "$ROUNDS" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    lang = line.split()[0]
    compiled = float(re.search(r"compiled in (\d+) ms", line).group(1))
    init = float(re.search(r"init in (\d+) ms", line).group(1))
    memory = float(re.search(r"linear memory ([\d.]+) MiB", line).group(1))
    batch = float(re.search(r"the hook took ([\d.]+) ms", line).group(1))
    rows.setdefault(lang, []).append((compiled, init, memory, batch))
def fmt(values, unit=""):
    return f"{statistics.median(values):g}{unit} ({min(values):g}-{max(values):g})"
print(f"rounds: {sys.argv[2]}, batch of 2000 records; median (min-max)")
print("| language | hook per batch ms | per record µs | vs Rust | compile ms | init ms | linear memory MiB |")
print("|---|---|---|---|---|---|---|")
rust = statistics.median(b for *_, b in rows["rust"])
for lang in ["rust", "python", "js"]:
    c, i, m, b = zip(*rows[lang])
    per = [x * 1000 / 2000 for x in b]
    print(f"| {lang} | {fmt(b)} | {fmt([round(p, 2) for p in per])} | {statistics.median(b) / rust:.0f}x | {fmt(c)} | {fmt(i)} | {fmt(m)} |")
PY
rm -f "$out"
