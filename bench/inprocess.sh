#!/usr/bin/env bash
# In-process benchmark, side by side in one run: wasmgate's Extism runtime vs
# the official extism crate 1.30.0, same plugin (target/wasm/bench.wasm), same
# cases and timing protocol (bench/timing), alternating over several rounds.
# Results: bench/results/inprocess.jsonl. Usage: bench/inprocess.sh [ROUNDS] [--quick]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds="${1:-3}"; shift || true
out="$root/bench/results/inprocess.jsonl"
mkdir -p "$(dirname "$out")"; : > "$out"
ours="$root/target/release/examples/inprocess_bench"
theirs="$root/reference/extism-ref/target/release/extism-bench"
for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds" >&2
  taskset -c 0 "$ours" --plugin "$root/target/wasm/bench.wasm" --reflect-plugin "$root/target/wasm/reflect.wasm" "$@" | sed "s/^{/{\"round\":$r,/" >> "$out"
  taskset -c 0 "$theirs" --plugin "$root/target/wasm/bench.wasm" --reflect-plugin "$root/target/wasm/reflect.wasm" "$@" | sed "s/^{/{\"round\":$r,/" >> "$out"
done
echo "wrote $out" >&2
