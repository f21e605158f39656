#!/usr/bin/env bash
# A/B of two wasmgate binaries, interleaved in one run: `serve hello`, a
# gateway route through the Rust add_header filter, and a route proxied to an
# nginx upstream without filters and with that filter; servers on core 0, wrk
# on core 1.
# Usage: bench/ab.sh OLD_BINARY NEW_BINARY [ROUNDS]
# (build an older commit with its own target dir, e.g.
#  git worktree add /tmp/old <commit> && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target cargo build --release -p wasmgate-cli))
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
old="$1" new="$2" rounds="${3:-4}"
tmp="$(mktemp -d /tmp/wasmgate-ab.XXXXXX)"
pid="" upstream=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; [ -n "$upstream" ] && kill "$upstream" 2>/dev/null; rm -rf "$tmp"' EXIT
# The proxied route's upstream: one nginx process answering a fixed body.
mkdir -p "$tmp/nginx"
cat >"$tmp/nginx/nginx.conf" <<EOF
daemon off; master_process off; worker_processes 1;
pid $tmp/nginx/nginx.pid; error_log $tmp/nginx/error.log warn;
events { worker_connections 1024; }
http { access_log off; keepalive_requests 1000000; client_body_temp_path $tmp/nginx/b;
  proxy_temp_path $tmp/nginx/p; fastcgi_temp_path $tmp/nginx/f; uwsgi_temp_path $tmp/nginx/u;
  scgi_temp_path $tmp/nginx/s;
  server { listen 127.0.0.1:18703; location / { return 200 "hello from upstream\n"; } } }
EOF
taskset -c 0 nginx -p "$tmp/nginx" -e "$tmp/nginx/error.log" -c "$tmp/nginx/nginx.conf" &
upstream=$!
cat >"$tmp/gw.yaml" <<YAML
listen: 127.0.0.1:18701
limits: {threads: 1}
plugins:
  - {name: tag, wasm: $root/target/wasm/add_header.wasm}
upstreams:
  - {name: up, nodes: [{address: 127.0.0.1:18703}]}
routes:
  - {name: tagged, path: {prefix: /tag}, plugins: [{plugin: tag}], respond: {status: 200, body: ok}}
  - {name: proxied, path: {prefix: /proxy}, upstream: up}
  - {name: proxied-tagged, path: {prefix: /ptag}, plugins: [{plugin: tag}], upstream: up}
YAML
printf 'wrk.method = "POST"\nwrk.body = "John Doe"\n' >"$tmp/post.lua"
tck="$(getconf CLK_TCK)"
# req/s, and the server's CPU time per request (user + system, from /proc),
# which moves less than req/s on this noisy machine (issue 15, item 1).
measure() { # url [script]
  local before after out
  before="$(awk '{print $14 + $15}' "/proc/$pid/stat")"
  out="$(taskset -c 1 wrk -t1 -c32 -d5s ${2:+-s "$2"} "$1")"
  after="$(awk '{print $14 + $15}' "/proc/$pid/stat")"
  awk -v ticks="$((after - before))" -v tck="$tck" '
    /requests in/ {n = $1} /Requests\/sec/ {rps = $2}
    END {printf "%s/%.2f", rps, ticks / tck / n * 1e6}' <<<"$out"
}
round() { # binary label
  taskset -c 0 "$1" serve "$root/target/wasm/hello.wasm" hello --port 18702 --threads 1 --log-level warn 2>/dev/null &
  pid=$!; sleep 1.5
  local serve; serve="$(measure http://127.0.0.1:18702/ "$tmp/post.lua")"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  taskset -c 0 "$1" run -c "$tmp/gw.yaml" --no-watch --log-level warn 2>/dev/null &
  pid=$!; sleep 1.5
  local gateway; gateway="$(measure http://127.0.0.1:18701/tag)"
  local proxied; proxied="$(measure http://127.0.0.1:18701/proxy)"
  local proxied_filter; proxied_filter="$(measure http://127.0.0.1:18701/ptag)"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  pid=""
  echo "$2 serve=$serve gateway_filter=$gateway proxied=$proxied proxied_filter=$proxied_filter"
}
echo "each case: req/s / CPU µs per request"
for _ in $(seq "$rounds"); do round "$old" old; round "$new" new; done | tee "$tmp/out"
# new/old of the means: req/s (higher is better), CPU per request (lower is better).
awk -F'[ =/]' '{for (i = 2; i <= NF; i += 3) {name[i] = $i; rps[$1, i] += $(i + 1); cpu[$1, i] += $(i + 2)}}
  END {for (i = 2; i in name; i += 3)
    printf "%s: new/old req/s %.3f, CPU per request %.3f\n", name[i],
      rps["new", i] / rps["old", i], cpu["new", i] / cpu["old", i]}' "$tmp/out"
