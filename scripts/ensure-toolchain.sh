#!/usr/bin/env bash
# Adds what the build needs beyond a plain Rust toolchain: the wasm32-wasip2 target the policy
# components are built for. Idempotent; demo.sh, test.sh and .ci/run call it.
set -euo pipefail
command -v cargo >/dev/null || { echo "cargo is missing: install Rust with rustup" >&2; exit 1; }
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  echo "adding the wasm32-wasip2 target (policy components)" >&2
  rustup target add wasm32-wasip2
fi
