#!/usr/bin/env bash
# Gateway benchmark: wasmgate (no filter, Rust / Go / chained Proxy-Wasm filters,
# wasm vs native local answer) against the bare upstream and an nginx reverse
# proxy, side by side in one run. Servers share CPU 0, wrk runs on CPU 1; the
# scenarios are interleaved round-robin so machine noise hits all of them alike.
# Usage: [ROUNDS=3] [SECONDS=5] bench/gateway.sh   (then bench/gateway_report.py)
# Output: bench/results/gateway.json
set -euo pipefail
# SECONDS is bash's own clock (it keeps counting from the value it was given),
# so read the value this script was started with from its initial environment.
dur="$(tr '\0' '\n' </proc/$$/environ | sed -n 's/^SECONDS=//p')"
dur="${dur:-5}"
rounds="${ROUNDS:-3}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

UP=18401 NGX=18402 GW=18403
conns=32

command -v wrk >/dev/null || { apt-get install -y wrk || { apt-get update && apt-get install -y wrk; }; }
command -v nginx >/dev/null || { apt-get install -y nginx || { apt-get update && apt-get install -y nginx; }; }
[ -x target/release/wasmgate ] || cargo build --release -p wasmgate-cli
for p in add_header go_add_header fault_injection; do
  [ -f "target/wasm/$p.wasm" ] || { plugins/build.sh; break; }
done

tmp="$(mktemp -d /tmp/wasmgate-bench.XXXXXX)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# One nginx per role, each its own single process (no master), pinned to CPU 0.
# The upstream and the nginx proxy are separate processes so that nginx, like
# wasmgate, pays for the hop between proxy and upstream on the shared core.
# keepalive_requests is raised so that neither wrk's nor the proxies' pooled
# connections are closed every 1000 requests (nginx's default).
nginx_start() { # name, server block
  mkdir -p "$tmp/$1"
  cat >"$tmp/$1/nginx.conf" <<EOF
daemon off; master_process off; worker_processes 1;
pid $tmp/$1/nginx.pid; error_log $tmp/$1/error.log warn;
events { worker_connections 4096; }
http {
  access_log off; keepalive_requests 1000000;
  client_body_temp_path $tmp/$1/body; proxy_temp_path $tmp/$1/proxy;
  fastcgi_temp_path $tmp/$1/fastcgi; uwsgi_temp_path $tmp/$1/uwsgi; scgi_temp_path $tmp/$1/scgi;
  upstream up { server 127.0.0.1:$UP; keepalive 64; keepalive_requests 1000000; }
  $2
}
EOF
  taskset -c 0 nginx -p "$tmp/$1" -e "$tmp/$1/error.log" -c "$tmp/$1/nginx.conf" &
  pids+=($!)
}

wait_port() { # port, pid
  for _ in $(seq 600); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { echo "process $2 for port $1 exited" >&2; return 1; }
    sleep 0.1
  done
  echo "nothing listens on port $1" >&2
  return 1
}

nginx_start upstream "server { listen 127.0.0.1:$UP; location / { return 200 \"hello from upstream\n\"; } }"
wait_port $UP "${pids[-1]}"
upstream_pid="${pids[-1]}"
nginx_start proxy "server { listen 127.0.0.1:$NGX; location / { proxy_pass http://up;
    proxy_http_version 1.1; proxy_set_header Connection \"\"; } }"
wait_port $NGX "${pids[-1]}"
nginx_pid="${pids[-1]}"

# One gateway holds every wasmgate scenario as a route. One worker thread: it
# shares CPU 0 with the upstream. Absolute wasm paths: the config lives in $tmp.
w="$root/target/wasm"
cat >"$tmp/gateway.yaml" <<EOF
listen: 127.0.0.1:$GW
limits: {threads: 1}
access_log: {enabled: false}   # nginx's is off too
plugins:
  - {name: add_header, wasm: $w/add_header.wasm}
  - {name: go_add_header, wasm: $w/go_add_header.wasm}
  - {name: add_header_2, wasm: $w/add_header.wasm}
  - {name: fault_injection, wasm: $w/fault_injection.wasm}
upstreams:
  - {name: up, nodes: [{address: 127.0.0.1:$UP}]}
routes:
  - {name: none, path: {prefix: /none}, upstream: up}
  - name: rust
    path: {prefix: /rust}
    plugins: [{plugin: add_header, conf: bench}]
    upstream: up
  - name: go
    path: {prefix: /go}
    plugins: [{plugin: go_add_header, conf: bench}]
    upstream: up
  - name: chain
    path: {prefix: /chain}
    plugins:
      - {plugin: add_header, conf: first}
      - {plugin: go_add_header, conf: second}
      - {plugin: add_header_2, conf: third}
    upstream: up
  - name: fault
    path: {prefix: /fault}
    plugins: [{plugin: fault_injection, conf: {body: "hello world", http_status: 200}}]
    upstream: up # never reached: the filter answers
  - {name: native, path: {prefix: /native}, respond: {status: 200, body: "hello world"}}
EOF
target/release/wasmgate check -c "$tmp/gateway.yaml" >/dev/null
# warn: the filters log every request at info, which would be measured too.
taskset -c 0 target/release/wasmgate run -c "$tmp/gateway.yaml" --log-level warn &
pids+=($!)
wait_port $GW "${pids[-1]}"
gateway_pid="${pids[-1]}"

declare -A url=(
  [upstream]="http://127.0.0.1:$UP/" [nginx]="http://127.0.0.1:$NGX/"
  [none]="http://127.0.0.1:$GW/none" [rust]="http://127.0.0.1:$GW/rust"
  [go]="http://127.0.0.1:$GW/go" [chain3]="http://127.0.0.1:$GW/chain"
  [fault-wasm]="http://127.0.0.1:$GW/fault" [fault-native]="http://127.0.0.1:$GW/native"
)
scenarios=(upstream nginx none rust go chain3 fault-wasm fault-native)
latency_scenarios=(none rust chain3) # again with one connection: latency, not throughput

# A wrong route would answer 404 very fast: check each answer before timing it.
for s in "${scenarios[@]}"; do
  body="$(curl -sf -D "$tmp/headers" "${url[$s]}")" || { echo "$s: ${url[$s]} failed" >&2; exit 1; }
  case "$s" in fault-*) want="hello world" ;; *) want="hello from upstream" ;; esac
  [[ "$body" == "$want"* ]] || { echo "$s: unexpected body '$body'" >&2; exit 1; }
  case "$s" in rust | go | chain3) grep -qi '^x-seen-path' "$tmp/headers" || { echo "$s: filter did not run" >&2; exit 1; } ;; esac
done

# The process that answers each scenario, and the upstream behind it (none
# for the upstream itself and the local answers): their CPU time per request
# is measured from /proc, steadier than req/s on this machine (issue 15).
declare -A server_pid=([upstream]=$upstream_pid [nginx]=$nginx_pid)
for s in none rust go chain3 fault-wasm fault-native; do server_pid[$s]=$gateway_pid; done
declare -A behind_pid=([nginx]=$upstream_pid [none]=$upstream_pid [rust]=$upstream_pid
  [go]=$upstream_pid [chain3]=$upstream_pid)
cpu_ticks() { # pid (none: 0): user + system time in clock ticks
  if [ -n "$1" ]; then awk '{print $14 + $15}' "/proc/$1/stat"; else echo 0; fi
}
tck="$(getconf CLK_TCK)"

# Prints one JSON object: req/s, p50/p99 in µs, errors (non-2xx + socket
# errors), and CPU µs per request of the server and of the upstream behind it.
measure() { # scenario, conns, seconds, round
  local server="${server_pid[$1]}" behind="${behind_pid[$1]:-}" s0 b0 out
  s0="$(cpu_ticks "$server")" b0="$(cpu_ticks "$behind")"
  out="$(taskset -c 1 wrk -t1 -c"$2" -d"$3s" --latency "${url[$1]}")"
  awk -v s="$1" -v c="$2" -v r="$4" -v tck="$tck" \
    -v server_ticks="$(($(cpu_ticks "$server") - s0))" -v behind_ticks="$(($(cpu_ticks "$behind") - b0))" '
    function us(v) { return v ~ /us$/ ? v + 0 : v ~ /ms$/ ? v * 1000 : v * 1e6 }
    $1 == "50%" { p50 = us($2) }
    $1 == "99%" { p99 = us($2) }
    /requests in/ { n = $1 }
    /^Requests\/sec:/ { rps = $2 }
    /^  Non-2xx/ { err += $NF }
    /^  Socket errors:/ { err += $4 + $6 + $8 + $10 }
    END { printf "{\"scenario\":\"%s\",\"conns\":%d,\"round\":%d,\"rps\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f,\"errors\":%d,\"cpu_us\":%.2f,\"upstream_cpu_us\":%.2f}\n",
                 s, c, r, rps, p50, p99, err, server_ticks / tck / n * 1e6, behind_ticks / tck / n * 1e6 }' <<<"$out"
}

# Warm-up: instance pools, upstream keep-alive connections, caches.
for s in "${scenarios[@]}"; do measure "$s" $conns 1 0 >/dev/null; done

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
runs=()
for r in $(seq "$rounds"); do
  for s in "${scenarios[@]}"; do runs+=("$(measure "$s" $conns "$dur" "$r")"); echo "${runs[-1]}"; done
  for s in "${latency_scenarios[@]}"; do runs+=("$(measure "$s" 1 "$dur" "$r")"); echo "${runs[-1]}"; done
done

mkdir -p bench/results
{
  printf '{"rounds":%d,"seconds":%d,"loadavg_before":"%s","loadavg_after":"%s",\n "runs":[\n  ' \
    "$rounds" "$dur" "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)"
  printf '%s\n' "${runs[@]}" | sed '$!s/$/,/; 2,$s/^/  /'
  echo ' ]}'
} >bench/results/gateway.json
echo "wrote bench/results/gateway.json; table: bench/gateway_report.py" >&2
