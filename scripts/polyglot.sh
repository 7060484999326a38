#!/usr/bin/env bash
# Builds the policy components written in Python (plugins/python/NAME/app.py) and JavaScript
# (plugins/js/NAME/app.js) against wit/, with toolchains pinned here and kept in
# ~/.cache/strait/polyglot: componentize-py from PyPI in a venv of its own, componentize-js from
# npm. Writes plugins/target/polyglot/LANG-NAME.wasm, and rebuilds one only when its source, the
# WIT or the toolchain changed. Needs python3 with venv, and node with npm.
#
#   scripts/polyglot.sh            build every component
#   scripts/polyglot.sh path LANG NAME   build if needed, print the component's path
set -euo pipefail
cd "$(dirname "$0")/.."
COMPONENTIZE_PY=0.25.1
COMPONENTIZE_JS=0.23.0
CACHE=${STRAIT_CACHE_DIR:-$HOME/.cache/strait}/polyglot
OUT=plugins/target/polyglot
mkdir -p "$OUT" "$CACHE"

python_toolchain() {
  local venv=$CACHE/componentize-py-$COMPONENTIZE_PY
  if [[ ! -x $venv/bin/componentize-py ]]; then
    echo "polyglot: installing componentize-py $COMPONENTIZE_PY" >&2
    python3 -m venv "$venv.tmp" && "$venv.tmp/bin/pip" install -q "componentize-py==$COMPONENTIZE_PY" >&2
    rm -rf "$venv" && mv "$venv.tmp" "$venv"
    # The venv's scripts name their interpreter by the path they were installed under.
    sed -i "1s|$venv.tmp|$venv|" "$venv/bin/componentize-py"
  fi
  echo "$venv/bin/componentize-py"
}

js_toolchain() {
  local dir=$CACHE/componentize-js-$COMPONENTIZE_JS
  if [[ ! -x $dir/node_modules/.bin/componentize-js ]]; then
    echo "polyglot: installing componentize-js $COMPONENTIZE_JS" >&2
    mkdir -p "$dir"
    npm install --prefix "$dir" --no-audit --no-fund --silent "@bytecodealliance/componentize-js@$COMPONENTIZE_JS" >&2
  fi
  echo "$dir/node_modules/.bin/componentize-js"
}

# build LANG NAME: the component's path, built if its stamp is stale.
build() {
  local lang=$1 name=$2 src out stamp want
  case $lang in
    python) src=plugins/python/$name/app.py ;;
    js) src=plugins/js/$name/app.js ;;
    *) echo "polyglot: unknown language $lang (python or js)" >&2; exit 2 ;;
  esac
  [[ -f $src ]] || { echo "polyglot: no $src" >&2; exit 2; }
  out=$OUT/$lang-$name.wasm
  stamp=$out.stamp
  want=$(cat "$src" wit/policy.wit <(echo "$COMPONENTIZE_PY $COMPONENTIZE_JS") | sha256sum | cut -d' ' -f1)
  if [[ ! -f $out || ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
    echo "polyglot: building $out" >&2
    case $lang in
      python)
        local tool; tool=$(python_toolchain)
        (cd "$(dirname "$src")" && "$tool" -d "$OLDPWD/wit" -w policy componentize app -o "$OLDPWD/$out.tmp") >&2
        ;;
      js)
        # componentize-js reads its inputs by paths under the working directory.
        local tool; tool=$(js_toolchain)
        "$tool" "$src" --wit wit --world-name policy -d stdio random clocks http fetch-event -o "$out.tmp" >&2
        ;;
    esac
    mv "$out.tmp" "$out"
    echo "$want" >"$stamp"
  fi
  echo "$out"
}

if [[ ${1-} == path ]]; then
  build "$2" "$3"
  exit
fi
for dir in plugins/python/*/ plugins/js/*/; do
  lang=$(basename "$(dirname "$dir")")
  build "$lang" "$(basename "$dir")" >/dev/null
done
ls -l "$OUT"/*.wasm
