#!/usr/bin/env bash
# `make demo-gateway`: the example gateway (examples/gateway/wasmgate.yaml)
# in front of its demo upstream (upstream.py), in the foreground; Ctrl-C
# stops both. Ports: PORT (traffic, 8080), ADMIN_PORT (admin API and
# dashboard, 9901), UPSTREAM_PORT (the demo upstream, 9000).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
port="${PORT:-8080}" admin_port="${ADMIN_PORT:-9901}" upstream_port="${UPSTREAM_PORT:-9000}"
command -v python3 >/dev/null || { echo "error: the demo upstream needs python3" >&2; exit 1; }
[ -f "$root/target/wasm/go_add_header.wasm" ] || {
  echo "error: target/wasm/go_add_header.wasm is missing: the gateway demo's Go filter needs Go 1.24 or newer (https://go.dev/dl/), then make demo-gateway again" >&2
  exit 1
}
config="$here/wasmgate.yaml"
if [ "$upstream_port" != 9000 ]; then
  # The example names its upstream's port: a copy with the other one, beside
  # the build (so the plugin paths, relative to the file, still lead to target/wasm).
  mkdir -p "$root/target/demo-gateway"
  config="$root/target/demo-gateway/wasmgate.yaml"
  sed -e "s|127.0.0.1:9000|127.0.0.1:$upstream_port|" -e "s|\.\./\.\./target/wasm/|../wasm/|" "$here/wasmgate.yaml" >"$config"
fi
python3 "$here/upstream.py" "$upstream_port" &
upstream=$!
trap 'kill $upstream 2>/dev/null' EXIT
cat <<TEXT

wasmgate is running the example gateway on 127.0.0.1:$port (admin on 127.0.0.1:$admin_port),
in front of a demo upstream on 127.0.0.1:$upstream_port that echoes what it receives. From a
second terminal, try:

  curl -i 127.0.0.1:$port/anything              # through a Rust and a Go filter: the upstream received
                                               # x-wasmgate-filter from both, and the response carries
                                               # their x-seen-path and x-seen-host
  curl -i 127.0.0.1:$port/fault                 # answered by the fault-injection filter, not the upstream
  curl -X POST 127.0.0.1:$port/hello -d 'Ada'   # an Extism function route
  curl 127.0.0.1:$admin_port/routes                   # the admin API (docs/admin.md)
  curl -s 127.0.0.1:$admin_port/metrics | grep wasmgate_route_requests_total

and open http://127.0.0.1:$admin_port/ in a browser: the dashboard (docs/dashboard.md).
A port in use? PORT=8081 ADMIN_PORT=9902 UPSTREAM_PORT=9001 make demo-gateway

Ctrl-C stops the gateway and the upstream.

TEXT
"$root/target/release/wasmgate" run -c "$config" --listen "127.0.0.1:$port" --admin "127.0.0.1:$admin_port"
