#!/usr/bin/env bash
# R1: 1000 concurrent keep-alive connections for DURATION s (default 30) on
# `wasmgate serve` (hello.wasm) and on `wasmgate run` (a route with the
# add_header.wasm Proxy-Wasm filter proxying to a local upstream: nginx when
# installed, else the python upstream). Pass: wrk reports 0 socket errors
# (connect, read, write, timeout) and 0 non-2xx responses on both.
# Usage: [DURATION=30] [CONNS=1000] reliability/r1_connections.sh
source "$(dirname "$0")/lib.sh"
dur="${DURATION:-30}"
conns="${CONNS:-1000}"
command -v wrk >/dev/null || { echo "wrk is missing: scripts/install-deps.sh --bench" >&2; exit 2; }

# 1000 client sockets + as many server sockets + upstream connections.
hard="$(ulimit -Hn)"
if [ "$hard" != unlimited ] && [ "$hard" -lt $((conns * 3 + 256)) ]; then
  ulimit -Hn $((conns * 3 + 256)) 2>/dev/null || true
fi
ulimit -n "$(ulimit -Hn)"
echo "R1: $conns connections, ${dur} s each; ulimit -n $(ulimit -n)"

# Client timeout 10 s: a request slower than that is counted as an error.
run_wrk() { # name url [lua]
  local out="$TMP/wrk-$1.txt"
  timeout $((dur + 30)) wrk -t2 -c"$conns" -d"${dur}s" --timeout 10s --latency ${3:+-s "$3"} "$2" >"$out" 2>&1 || true
  sed 's/^/    /' "$out"
}

# --- serve
port="$(free_port)"
start serve "$WASMGATE" serve "$WASM/hello.wasm" hello --port "$port" --log-level warn
serve_pid=$LAST_PID
wait_port "$port" "$serve_pid"
body="$(curl -sf -m 5 -X POST "http://127.0.0.1:$port/" -d 'John Doe')"
check "serve answers hello" "$([ "$body" = '{"message":"Hello John Doe"}' ]; echo $?)" "$body"
cat >"$TMP/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = "John Doe"
LUA
echo "  serve: wrk -t2 -c$conns -d${dur}s --timeout 10s --latency -s post.lua http://127.0.0.1:$port/"
run_wrk serve "http://127.0.0.1:$port/" "$TMP/post.lua"
read -r s_rps s_p50 s_p99 s_reqs s_non2xx s_sock < <(wrk_summary "$TMP/wrk-serve.txt")
s_rss="$(hwm_kib "$serve_pid")"
check "serve: requests made" "$([ "$s_reqs" -gt 0 ]; echo $?)" "$s_reqs requests, $s_rps req/s, p50 $s_p50 ms, p99 $s_p99 ms, peak RSS $((s_rss / 1024)) MiB"
check "serve: 0 non-2xx" "$([ "$s_non2xx" = 0 ]; echo $?)" "$s_non2xx"
check "serve: 0 socket errors" "$([ "$s_sock" = 0 ]; echo $?)" "$s_sock"
kill -0 "$serve_pid" 2>/dev/null
check "serve: still running" $? ""
kill "$serve_pid" 2>/dev/null || true

# --- gateway: add_header filter, local upstream
up="$(free_port)"
if command -v nginx >/dev/null; then
  upstream_kind=nginx
  mkdir -p "$TMP/nginx"
  cat >"$TMP/nginx/nginx.conf" <<EOF
daemon off; master_process off; worker_processes 1;
pid $TMP/nginx/nginx.pid; error_log $TMP/nginx/error.log warn;
worker_rlimit_nofile 8192;
events { worker_connections 4096; }
http {
  access_log off; keepalive_requests 1000000;
  client_body_temp_path $TMP/nginx/body; proxy_temp_path $TMP/nginx/proxy;
  fastcgi_temp_path $TMP/nginx/fastcgi; uwsgi_temp_path $TMP/nginx/uwsgi; scgi_temp_path $TMP/nginx/scgi;
  server { listen 127.0.0.1:$up; location / { return 200 "hello from upstream\n"; } }
}
EOF
  start nginx nginx -p "$TMP/nginx" -e "$TMP/nginx/error.log" -c "$TMP/nginx/nginx.conf"
  wait_port "$up" "$LAST_PID"
else
  upstream_kind=python
  upstream "$up"
fi
gw="$(free_port)"
admin="$(free_port)"
cat >"$TMP/gateway.yaml" <<EOF
listen: 127.0.0.1:$gw
admin: 127.0.0.1:$admin
plugins:
  - {name: add_header, wasm: $WASM/add_header.wasm}
upstreams:
  - {name: up, nodes: [{address: 127.0.0.1:$up}]}
routes:
  - {name: filtered, path: {prefix: /}, plugins: [{plugin: add_header, conf: r1}], upstream: up}
EOF
start gateway "$WASMGATE" run -c "$TMP/gateway.yaml" --no-watch --log-level warn
gw_pid=$LAST_PID
wait_port "$gw" "$gw_pid"
headers="$(curl -sf -m 5 -D - -o /dev/null "http://127.0.0.1:$gw/r1")"
echo "$headers" | grep -qi '^x-seen-path: /r1'
check "gateway: filter runs (x-seen-path)" $? "upstream: $upstream_kind"
echo "  gateway: wrk -t2 -c$conns -d${dur}s --timeout 10s --latency http://127.0.0.1:$gw/r1"
run_wrk gateway "http://127.0.0.1:$gw/r1"
read -r g_rps g_p50 g_p99 g_reqs g_non2xx g_sock < <(wrk_summary "$TMP/wrk-gateway.txt")
g_rss="$(hwm_kib "$gw_pid")"
check "gateway: requests made" "$([ "$g_reqs" -gt 0 ]; echo $?)" "$g_reqs requests, $g_rps req/s, p50 $g_p50 ms, p99 $g_p99 ms, peak RSS $((g_rss / 1024)) MiB"
check "gateway: 0 non-2xx" "$([ "$g_non2xx" = 0 ]; echo $?)" "$g_non2xx"
check "gateway: 0 socket errors" "$([ "$g_sock" = 0 ]; echo $?)" "$g_sock"
m="$(curl -sf -m 5 "http://127.0.0.1:$admin/metrics" | grep 'wasmgate_route_requests_total{route="filtered",class="5xx"}' | awk '{print $2}')"
check "gateway: 0 5xx counted by the gateway" "$([ "${m:-0}" = 0 ]; echo $?)" "${m:-absent}"
# What the gateway says about any failure: pool rejections, failures, its log.
curl -sf -m 5 "http://127.0.0.1:$admin/metrics" | grep -E '^wasmgate_(plugin_pool_rejections_total|plugin_pool_waits_total|plugin_failures_total|route_requests_total|upstream_node_retries_total)' | grep -v ' 0$' | sed 's/^/    metric: /' || true
grep -E 'WARN|ERROR' "$TMP/gateway.log" | sed -E 's/\x1b\[[0-9;]*m//g; s/^[^ ]+ +//; s/[0-9]+(\.[0-9]+)?(ms|s)\b/N\2/g' | cut -c1-200 | sort | uniq -c | sort -rn | head -5 | sed 's/^/    log: /' || true
kill -0 "$gw_pid" 2>/dev/null
check "gateway: still running" $? ""

finish R1 "$conns conns x ${dur}s: serve $s_rps req/s p99 $s_p99 ms errors $((s_non2xx + s_sock)); gateway+filter $g_rps req/s p99 $g_p99 ms errors $((g_non2xx + g_sock))"
