#!/usr/bin/env bash
# A flame graph of the proxy path (issue 57): `wasmgate run` with one route
# and no filter (one worker, CPU 0) in front of nginx (`return 200`, CPU 1),
# driven by wrk (CPU 1) for SECONDS; perf samples the gateway's worker with
# DWARF call stacks (the release binary keeps its symbol table and .eh_frame)
# and inferno draws the graph. Kernel frames are included: on loopback about
# half of a request's time is the socket system calls.
# Usage: bench/flame.sh OUT.svg [BINARY] [SECONDS]
#   (needs perf, wrk, nginx and `cargo install inferno`)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$1" bin="${2:-$root/target/release/wasmgate}" seconds="${3:-5}"
tmp="$(mktemp -d /tmp/wasmgate-flame.XXXXXX)"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
UP=18471 PORT=18472
mkdir -p "$tmp/up"
cat >"$tmp/up/nginx.conf" <<EOF2
daemon off; master_process off; worker_processes 1; pid $tmp/up/nginx.pid; error_log $tmp/up/error.log warn;
events { worker_connections 1024; }
http { access_log off; keepalive_requests 1000000; client_body_temp_path $tmp/up/b; proxy_temp_path $tmp/up/p;
  fastcgi_temp_path $tmp/up/f; uwsgi_temp_path $tmp/up/u; scgi_temp_path $tmp/up/s;
  server { listen 127.0.0.1:$UP; location / { return 200 "hello from upstream\n"; } } }
EOF2
taskset -c 1 nginx -p "$tmp/up" -e "$tmp/up/error.log" -c "$tmp/up/nginx.conf" & pids+=($!)
cat >"$tmp/gateway.yaml" <<EOF2
listen: 127.0.0.1:$PORT
limits: {threads: 1}
access_log: {enabled: false}
upstreams: [{name: up, nodes: [{address: 127.0.0.1:$UP}]}]
routes: [{name: proxy, path: {prefix: /}, upstream: up}]
EOF2
taskset -c 0 "$bin" run -c "$tmp/gateway.yaml" --no-watch --log-level warn & pids+=($!)
gateway=$!
for _ in $(seq 100); do (echo >/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
taskset -c 1 wrk -t1 -c20 -d2s "http://127.0.0.1:$PORT/" >/dev/null
worker=$(ps -L -o tid=,comm= -p "$gateway" | awk '$2 ~ /wasmgate-worker/ {print $1; exit}')
taskset -c 1 wrk -t1 -c20 -d"$((seconds + 2))s" "http://127.0.0.1:$PORT/" >"$tmp/wrk.txt" & pids+=($!)
sleep 1
perf record -q -F 1999 --call-graph dwarf,16384 -t "$worker" -o "$tmp/perf.data" -- sleep "$seconds" 2>/dev/null
wait "${pids[-1]}" || true
grep "Requests/sec" "$tmp/wrk.txt"
perf script -i "$tmp/perf.data" 2>/dev/null | inferno-collapse-perf >"$tmp/folded"
inferno-flamegraph --title "wasmgate proxy, no filter: the worker thread" --width 1400 <"$tmp/folded" >"$out"
echo "wrote $out"
