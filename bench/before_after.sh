#!/usr/bin/env bash
# Two wasmgate binaries side by side, proxying a keep-alive GET to the same
# nginx upstream (all servers on CPU 0, wrk on CPU 1, the binaries' rounds
# interleaved), with nginx's own proxy beside them as the baseline: req/s and
# CPU time per request of each. For a change of the proxy path, before and
# after in one run (docs/benchmarks.md, issue 57's step 1). CPU time is split
# into user and system: instruction counts (callgrind) see only the first.
# Usage: bench/before_after.sh OLD_BINARY NEW_BINARY [ROUNDS] [SECONDS]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
old="$1" new="$2" rounds="${3:-3}" secs="${4:-5}"
UP=18461 NGX=18462 OLD=18463 NEW=18464
tmp="$(mktemp -d /tmp/wasmgate-ba.XXXXXX)"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"' EXIT
# shellcheck source=bench/nginx_conf.sh
. "$root/bench/nginx_conf.sh"
nginx_conf "$tmp/up" "server { listen 127.0.0.1:$UP; location / { return 200 \"hello from upstream\n\"; } }"
nginx_conf "$tmp/proxy" "upstream up { server 127.0.0.1:$UP; keepalive 128; }
  server { listen 127.0.0.1:$NGX; location / { proxy_pass http://up; proxy_http_version 1.1;
    proxy_set_header Connection \"\"; } }"
for n in up proxy; do
  taskset -c 0 nginx -p "$tmp/$n" -e "$tmp/$n/error.log" -c "$tmp/$n/nginx.conf" &
  pids+=($!)
done
for side in old new; do
  port=$OLD bin=$old
  [ "$side" = new ] && port=$NEW bin=$new
  cat >"$tmp/$side.yaml" <<EOF2
listen: 127.0.0.1:$port
limits: {threads: 1}
access_log: {enabled: false}
upstreams:
  - {name: up, nodes: [{address: 127.0.0.1:$UP}]}
routes:
  - {name: all, upstream: up}
EOF2
  taskset -c 0 "$bin" run -c "$tmp/$side.yaml" --no-watch --log-level warn &
  pids+=($!)
  eval "pid_$side=$!"
done
sleep 2
# User and system CPU ticks of a process so far.
cpu_of() { awk '{print $14, $15}' "/proc/$1/stat"; }
tick="$(getconf CLK_TCK)"
for round in $(seq "$rounds"); do
  for side in nginx old new; do
    case "$side" in
      nginx) port=$NGX pid=$(cat "$tmp/proxy/nginx.pid" 2>/dev/null || echo "") ;;
      old) port=$OLD pid=$pid_old ;;
      new) port=$NEW pid=$pid_new ;;
    esac
    # nginx's worker is the child of its master, when it has one.
    if [ "$side" = nginx ]; then
      worker="$(pgrep -P "$pid" | head -1 || true)"
      pid="${worker:-$pid}"
    fi
    before="$(cpu_of "$pid")"
    rps="$(taskset -c 1 wrk -t1 -c32 -d"${secs}s" "http://127.0.0.1:$port/" | awk '/Requests\/sec/ {print $2}')"
    after="$(cpu_of "$pid")"
    python3 - "$round" "$side" "$rps" "$secs" "$tick" $before $after <<'EOF2'
import json, sys
round_, side, rps, secs, tick = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
u0, s0, u1, s1 = map(float, sys.argv[6:10])
per = lambda ticks: round(ticks / tick * 1e6 / (rps * secs), 2)
print(json.dumps({"round": int(round_), "side": side, "rps": rps,
                  "user_us": per(u1 - u0), "system_us": per(s1 - s0)}))
EOF2
  done
done
