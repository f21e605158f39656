#!/usr/bin/env bash
# Everything a fresh machine needs beyond Rust (rustup) and Go: the pinned
# toolchain's wasm targets, the Go modules of the plugins and the servers the
# tests start (Redis, PostgreSQL). With `--bench` also the load generator and
# nginx (and valgrind) used by `make bench`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
toolchain="$(sed -n 's/^channel = "\(.*\)"/\1/p' "$root/rust-toolchain.toml")"

rustup toolchain list | grep -q "^$toolchain" || rustup toolchain install "$toolchain" --profile minimal -c rustfmt -c clippy
rustup component add --toolchain "$toolchain" rustfmt clippy >/dev/null
rustup target add --toolchain "$toolchain" wasm32-unknown-unknown wasm32-wasip1 >/dev/null

command -v go >/dev/null || { echo "error: Go (1.24 or newer) is required to build the Go plugins" >&2; exit 1; }
for mod in "$root"/plugins/go/*/ "$root"/plugins/proxy-wasm/go/*/ "$root"/reference/go-fiber/; do
  [ -f "$mod/go.mod" ] && (cd "$mod" && go mod download)
done
# Higress filters: go.sum pins the Higress modules, whose pseudo-versions the
# checksum database does not have; GONOSUMDB keeps go from asking it.
for mod in "$root"/plugins/higress/*/; do
  [ -f "$mod/go.mod" ] || continue
  (cd "$mod" && GONOSUMDB='github.com/higress-group/*' go mod download)
done

# Test servers (crates/testkit, a dev-dependency): tests start their own
# redis-server and PostgreSQL clusters (initdb, postgres, pg_isready, psql from
# /usr/lib/postgresql/<version>/bin) on free ports in temporary directories,
# and openssl makes the TLS certificate of a PostgreSQL test server. As root,
# the tests run PostgreSQL as the `postgres` user that the package creates.
# Debian's packages may also create and start system services (redis on port
# 6379, a "main" cluster on 5432, where an init system starts them): the tests
# neither use nor mind them (their ports are 20000-32767), so they are left alone.
test_pkgs=()
command -v redis-server >/dev/null || test_pkgs+=(redis-server)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null || test_pkgs+=(postgresql)
command -v openssl >/dev/null || test_pkgs+=(openssl)
# etcd for the cluster tests (crates/testkit's EtcdServer, docs/cluster.md),
# with etcdctl; and protoc, which building the etcd client (crates/cluster)
# needs to compile etcd's protobuf API (so this is a build dependency too).
command -v etcd >/dev/null || test_pkgs+=(etcd-server)
command -v etcdctl >/dev/null || test_pkgs+=(etcd-client)
command -v protoc >/dev/null || test_pkgs+=(protobuf-compiler)
# etcd's protos import protobuf's own (google/protobuf/descriptor.proto, ...),
# which Debian ships in libprotobuf-dev, not with protoc itself.
[ -f /usr/include/google/protobuf/descriptor.proto ] || test_pkgs+=(libprotobuf-dev)
# promtool (Debian's prometheus package) checks /metrics as Prometheus reads it
# (crates/cli/tests/trust.rs); the server it comes with is not started.
command -v promtool >/dev/null || test_pkgs+=(prometheus)
# Chromium for the dashboard's browser tests (tests/browser/, docs/dashboard.md),
# driven by Playwright for Python (installed below, pinned), which uses this
# Chromium instead of downloading its own browser.
command -v chromium >/dev/null || test_pkgs+=(chromium)
if [ ${#test_pkgs[@]} -gt 0 ]; then
  sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${test_pkgs[@]}" >/dev/null
fi

# Toolchains of the plugins from the other SDKs (docs/compatibility.md, built by
# plugins/build.sh): Node and npm for AssemblyScript (the npm packages
# themselves come from the lockfiles, `npm ci` in build.sh), Debian's
# emscripten (3.1.6 on bookworm) for the Proxy-Wasm C++ SDK, clang and lld for
# the Extism C PDK (wasm32, no libc). A fresh machine spends about 20-25 s here.
sdk_pkgs=()
command -v node >/dev/null || sdk_pkgs+=(nodejs)
command -v npm >/dev/null || sdk_pkgs+=(npm)
command -v em++ >/dev/null || sdk_pkgs+=(emscripten)
command -v clang >/dev/null || sdk_pkgs+=(clang)
command -v wasm-ld >/dev/null || sdk_pkgs+=(lld)
if [ ${#sdk_pkgs[@]} -gt 0 ]; then
  sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${sdk_pkgs[@]}" >/dev/null
fi

# h2spec, HTTP/2 conformance against the TLS listener (crates/cli/tests/tls.rs),
# built from the module pinned in tools/h2spec into target/test-bin;
# curl (HTTP/2 by ALPN, --resolve for SNI) and Python's ssl module drive the
# other TLS tests.
command -v curl >/dev/null || { sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo; $sudo apt-get update -qq; $sudo apt-get install -y -qq curl >/dev/null; }
if [ ! -x "$root/target/test-bin/h2spec" ]; then
  mkdir -p "$root/target/test-bin"
  (cd "$root/tools/h2spec" && go build -o "$root/target/test-bin/h2spec" github.com/summerwind/h2spec/cmd/h2spec)
fi

# Playwright for Python, pinned; only its driver is used (no browser download).
python3 -c 'import playwright, importlib.metadata as m; assert m.version("playwright") == "1.65.2"' 2>/dev/null ||
  python3 -m pip install --quiet --disable-pip-version-check playwright==1.65.2

# WebSocket and gRPC clients and servers of the protocol tests
# (crates/cli/tests/protocols.rs), pinned.
python3 -c 'import importlib.metadata as m; assert m.version("websockets") == "17.4" and m.version("grpcio") == "1.85.3"' 2>/dev/null ||
  python3 -m pip install --quiet --disable-pip-version-check websockets==17.4 grpcio==1.85.3

if [ "${1:-}" = "--bench" ]; then
  need=()
  # valgrind: bench/instructions.sh counts instructions under callgrind.
  for tool in wrk nginx valgrind; do command -v "$tool" >/dev/null || need+=("$tool"); done
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  # bench/db.sh: Toxiproxy (the emulated network round trip, built from source
  # into target/bench-bin) and the modules of its Go + pgx reference.
  if [ ! -x "$root/target/bench-bin/toxiproxy-server" ]; then
    mkdir -p "$root/target/bench-bin"
    GOBIN="$root/target/bench-bin" go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0
    mv "$root/target/bench-bin/server" "$root/target/bench-bin/toxiproxy-server"
  fi
  (cd "$root/reference/go-pgx" && go mod download)
  # bench/protocols.py: the Go peers' modules; the plots of the bench scripts.
  (cd "$root/bench/protopeers" && go mod download)
  python3 -c 'import matplotlib' 2>/dev/null || python3 -m pip install --quiet --disable-pip-version-check matplotlib==3.10.7
fi
