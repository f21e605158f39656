#!/usr/bin/env bash
# Memory across reloads: a gateway with a Rust and a Go filter under traffic
# is reloaded N times (POST /reload, every plugin and route rebuilt); its
# resident memory is read before, every 10 reloads, and at the end.
# Usage: [RELOADS=100] bench/reload_memory.sh   Output: bench/results/reload_memory.json
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
reloads="${RELOADS:-100}"
GW=18411 ADMIN=18412
command -v wrk >/dev/null || { apt-get install -y wrk || { apt-get update && apt-get install -y wrk; }; }
[ -x target/release/wasmgate ] || cargo build --release -p wasmgate-cli
[ -f target/wasm/go_add_header.wasm ] || plugins/build.sh

tmp="$(mktemp -d /tmp/wasmgate-reload.XXXXXX)"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
cat >"$tmp/gateway.yaml" <<YAML
listen: 127.0.0.1:$GW
admin: 127.0.0.1:$ADMIN
limits: {threads: 1}
plugins:
  - {name: rust, wasm: $root/target/wasm/add_header.wasm}
  - {name: go, wasm: $root/target/wasm/go_add_header.wasm}
routes:
  - {name: rust, path: {prefix: /rust}, plugins: [{plugin: rust, conf: r}], respond: {status: 200, body: ok}}
  - {name: go, path: {prefix: /go}, plugins: [{plugin: go, conf: g}], respond: {status: 200, body: ok}}
YAML
${WASMGATE_ENV:-} target/release/wasmgate run -c "$tmp/gateway.yaml" --no-watch --log-level warn &
pid=$!
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$ADMIN/healthz" >/dev/null && break; sleep 0.1; done

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$pid/status"; }
metric() { curl -sf "http://127.0.0.1:$ADMIN/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
sample() { # reloads done
  printf '{"reloads":%d,"rss_kib":%d,"instances":%d,"warm_memories":%d,"warm_bytes":%d}' "$1" "$(rss_kib)" \
    "$(metric wasmgate_pool_instances)" "$(metric wasmgate_pool_unused_warm_memories)" \
    "$(metric wasmgate_pool_unused_memory_bytes_resident)"
}
traffic() { # seconds
  wrk -t1 -c8 -d"$1s" "http://127.0.0.1:$GW/rust" >/dev/null &
  local other=$!
  wrk -t1 -c8 -d"$1s" "http://127.0.0.1:$GW/go" >/dev/null
  wait "$other"
}
traffic 3
samples=("$(sample 0)")
for i in $(seq "$reloads"); do
  curl -sf -X POST -H "X-Wasmgate-Admin: 1" "http://127.0.0.1:$ADMIN/reload" >/dev/null || { echo "reload $i failed" >&2; exit 1; }
  if (( i % 10 == 0 )); then
    traffic 1
    samples+=("$(sample "$i")")
    echo "${samples[-1]}"
  fi
done
generation="$(curl -sf "http://127.0.0.1:$ADMIN/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["reload"]["generation"])')"
mkdir -p bench/results
printf '{"reloads":%d,"generation":%s,"samples":[%s]}\n' "$reloads" "$generation" \
  "$(IFS=,; echo "${samples[*]}")" >bench/results/reload_memory.json
echo "wrote bench/results/reload_memory.json (generation $generation)" >&2
