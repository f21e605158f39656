#!/usr/bin/env bash
# A/B of two wasmgate binaries, interleaved in one run: `serve hello` and a
# gateway route through the Rust add_header filter; server on core 0, wrk on
# core 1. Usage: bench/ab.sh OLD_BINARY NEW_BINARY [ROUNDS]
# (build an older commit with its own target dir, e.g.
#  git worktree add /tmp/old <commit> && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target cargo build --release -p wasmgate-cli))
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
old="$1" new="$2" rounds="${3:-4}"
tmp="$(mktemp -d /tmp/wasmgate-ab.XXXXXX)"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
cat >"$tmp/gw.yaml" <<YAML
listen: 127.0.0.1:18701
limits: {threads: 1}
plugins:
  - {name: tag, wasm: $root/target/wasm/add_header.wasm}
routes:
  - {name: tagged, path: {prefix: /tag}, plugins: [{plugin: tag}], respond: {status: 200, body: ok}}
YAML
printf 'wrk.method = "POST"\nwrk.body = "John Doe"\n' >"$tmp/post.lua"
measure() { # url [script]
  taskset -c 1 wrk -t1 -c32 -d5s ${2:+-s "$2"} "$1" | awk '/Requests\/sec/ {print $2}'
}
round() { # binary label
  taskset -c 0 "$1" serve "$root/target/wasm/hello.wasm" hello --port 18702 --threads 1 --log-level warn 2>/dev/null &
  pid=$!; sleep 1.5
  local serve; serve="$(measure http://127.0.0.1:18702/ "$tmp/post.lua")"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  taskset -c 0 "$1" run -c "$tmp/gw.yaml" --no-watch --log-level warn 2>/dev/null &
  pid=$!; sleep 1.5
  local gateway; gateway="$(measure http://127.0.0.1:18701/tag)"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  pid=""
  echo "$2 serve=$serve gateway_filter=$gateway"
}
for _ in $(seq "$rounds"); do round "$old" old; round "$new" new; done | tee "$tmp/out"
awk -F'[ =]' '{s[$1]+=$3; g[$1]+=$5; n[$1]++}
  END {printf "serve: new/old %.3f   gateway_filter: new/old %.3f\n", (s["new"]/n["new"])/(s["old"]/n["old"]), (g["new"]/n["new"])/(g["old"]/n["old"])}' "$tmp/out"
