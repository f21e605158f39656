#!/usr/bin/env bash
# Issue 57's design step: instructions per proxied request (callgrind,
# bench/instructions.py) of the proxy designs measured side by side, all in
# front of the same nginx upstream, one keep-alive client connection:
#   nginx             the baseline (proxy_pass with upstream keep-alive)
#   wasmgate          `wasmgate run`, a route without filters, access log off
#   hyper-conn-proxy  hyper's server + hyper's client connection, nothing else
#                     (the floor of wasmgate's present design)
#   hyper-proxy       hyper's server + hyper-util's pooled legacy client
#   lean-proxy        HTTP/1.1 by the proxy itself: httparse + heads written
#                     from the parsed head, in the request's own task
#   pingora proxy     Pingora 0.9's ProxyHttp, one thread, no work stealing
# Usage: bench/stack-probe/instructions.sh [REQUESTS]  (build first:
#   cargo build --release -p wasmgate-cli; cd bench/stack-probe && cargo build --release)
# Output: bench/results/design.jsonl and a table on stdout.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
probe="$root/bench/stack-probe/target/release"
requests="${1:-2000}"
cd "$root"
tmp="$(mktemp -d /tmp/wasmgate-design.XXXXXX)"
upstream_pid=""
trap '[ -n "$upstream_pid" ] && kill "$upstream_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
out=bench/results/design.jsonl
: >"$out"
# shellcheck source=bench/nginx_conf.sh
. "$root/bench/nginx_conf.sh"
UP=18451
nginx_conf "$tmp/up" "server { listen 127.0.0.1:$UP; location / { return 200 \"hello from upstream\n\"; } }"
nginx -p "$tmp/up" -e "$tmp/up/error.log" -c "$tmp/up/nginx.conf" &
upstream_pid=$!
count() { python3 bench/instructions.py --requests "$requests" --components --json "$out" \
  --expect "hello from upstream" "$@" | grep -v "^sending"; }

nginx_conf "$tmp/proxy" "upstream up { server 127.0.0.1:$UP; keepalive 64; keepalive_requests 1000000; }
  server { listen 127.0.0.1:{port}; location / { proxy_pass http://up; proxy_http_version 1.1;
    proxy_set_header Connection \"\"; } }"
count "nginx proxy" --config "$tmp/proxy/nginx.conf" -- nginx -p "$tmp/proxy" -e "$tmp/proxy/error.log" -c {config}
cat >"$tmp/gateway.yaml" <<EOF2
listen: 127.0.0.1:{port}
limits: {threads: 1}
access_log: {enabled: false}
upstreams: [{name: up, nodes: [{address: 127.0.0.1:$UP}]}]
routes: [{name: proxy, path: {prefix: /}, upstream: up}]
EOF2
count "wasmgate proxy" --config "$tmp/gateway.yaml" -- target/release/wasmgate run -c {config} --no-watch --log-level warn
# Copied under neutral names: instructions.py splits costs by function and
# object name, and an object named "hyper-..." would put all of it on hyper.
for design in hyper-conn-proxy hyper-proxy lean-proxy; do
  cp "$probe/$design" "$tmp/probe-${design%-proxy}"
  count "$design" -- "$tmp/probe-${design%-proxy}" {port} "$UP"
done
printf 'threads: 1\nwork_stealing: false\nupstream_keepalive_pool_size: 256\ngrace_period_seconds: 0\ngraceful_shutdown_timeout_seconds: 1\n' >"$tmp/pingora.yaml"
cp "$probe/pingora-probe" "$tmp/probe-pingora"
count "pingora proxy" -- "$tmp/probe-pingora" proxy {port} "$UP" -c "$tmp/pingora.yaml"
