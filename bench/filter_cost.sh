#!/usr/bin/env bash
# CPU time per request of the gateway's filter path (docs/benchmarks.md,
# "The filter path and the proxy path today"): one `wasmgate run` (one worker,
# CPU 0) with `respond` routes and no upstream, so that only the gateway and
# its filters cost CPU; wrk -c32 on CPU 1. For each route, the gateway's CPU
# time from /proc over the run divided by the requests served.
# Usage: bench/filter_cost.sh [BINARY] [SECONDS]
# With PERF=1, also records a `perf` profile per route into $tmp (kept).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${1:-$root/target/release/wasmgate}" seconds="${2:-4}"
tmp="$(mktemp -d /tmp/wasmgate-filter-cost.XXXXXX)"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; [ -z "${PERF:-}" ] && rm -rf "$tmp"' EXIT
w="$root/target/wasm"
cat >"$tmp/gw.yaml" <<YAML
listen: 127.0.0.1:18811
limits: {threads: 1}
plugins:
  - {name: rust, wasm: $w/add_header.wasm}
  - {name: go, wasm: $w/go_add_header.wasm}
routes:
  - {name: rust, path: {prefix: /rust}, plugins: [{plugin: rust}], respond: {status: 200, body: ok}}
  - {name: go, path: {prefix: /go}, plugins: [{plugin: go}], respond: {status: 200, body: ok}}
  - {name: chain, path: {prefix: /chain}, plugins: [{plugin: rust}, {plugin: go}, {plugin: rust}], respond: {status: 200, body: ok}}
  - {name: plain, path: {prefix: /}, respond: {status: 200, body: ok}}
YAML
WASMGATE_PERFMAP=${PERF:+1} taskset -c 0 "$bin" run -c "$tmp/gw.yaml" --no-watch --log-level warn 2>/dev/null &
pid=$!
sleep 1.5
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
for path in / /rust /go /chain; do
  perf_pid=""
  if [ -n "${PERF:-}" ]; then
    perf record -F 2999 -g -p "$pid" -o "$tmp/perf${path//\//_}.data" -- sleep "$seconds" 2>/dev/null &
    perf_pid=$!
  fi
  before=$(ticks)
  requests=$(taskset -c 1 wrk -t1 -c32 -d"${seconds}s" "http://127.0.0.1:18811$path" | awk '/requests in/ {print $1}')
  after=$(ticks)
  if [ -n "$perf_pid" ]; then wait "$perf_pid"; fi
  awk -v p="$path" -v t=$((after - before)) -v n="$requests" -v hz="$hz" \
    'BEGIN {printf "%-7s %8d requests  %6.2f us CPU per request\n", p, n, t * 1e6 / hz / n}'
done
if [ -n "${PERF:-}" ]; then
  echo "profiles: $tmp/perf_*.data (perf report -i ... --no-children --sort dso,symbol)"
fi
