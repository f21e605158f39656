#!/usr/bin/env bash
# `make demo-gateway`: the example gateway (examples/gateway/wasmgate.yaml)
# in front of its demo upstream (upstream.py on 127.0.0.1:9000), in the
# foreground; Ctrl-C stops both.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
command -v python3 >/dev/null || { echo "error: the demo upstream needs python3" >&2; exit 1; }
python3 "$here/upstream.py" 9000 &
upstream=$!
trap 'kill $upstream 2>/dev/null' EXIT
cat <<'TEXT'

wasmgate is running the example gateway on 127.0.0.1:8080 (admin on 127.0.0.1:9901),
in front of a demo upstream on 127.0.0.1:9000 that echoes what it receives. From a
second terminal, try:

  curl -i 127.0.0.1:8080/anything              # through a Rust and a Go filter: the upstream received
                                               # x-wasmgate-filter from both, and the response carries
                                               # their x-seen-path and x-seen-host
  curl -i 127.0.0.1:8080/fault                 # answered by the fault-injection filter, not the upstream
  curl -X POST 127.0.0.1:8080/hello -d 'Ada'   # an Extism function route
  curl 127.0.0.1:9901/routes                   # the admin API (docs/admin.md)
  curl -s 127.0.0.1:9901/metrics | grep wasmgate_route_requests_total

and open http://127.0.0.1:9901/ in a browser: the dashboard (docs/dashboard.md).

Ctrl-C stops the gateway and the upstream.

TEXT
"$root/target/release/wasmgate" run -c "$here/wasmgate.yaml"
