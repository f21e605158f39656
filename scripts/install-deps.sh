#!/usr/bin/env bash
# What a fresh machine needs beyond Rust (rustup) and Go.
#
#   scripts/install-deps.sh --demo   what `make demo` and `make demo-gateway` need:
#                                    the pinned toolchain's wasm targets and what
#                                    building the binary needs (protoc, a C compiler)
#   scripts/install-deps.sh          everything `make test` needs besides: the Go
#                                    modules of the plugins, the servers the tests
#                                    start (Redis, PostgreSQL, etcd), the other SDKs'
#                                    toolchains, Chromium
#   scripts/install-deps.sh --bench  and the load generator, nginx, valgrind and
#                                    testssl.sh of `make bench`
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
toolchain="$(sed -n 's/^channel = "\(.*\)"/\1/p' "$root/rust-toolchain.toml")"

rustup toolchain list | grep -q "^$toolchain" || rustup toolchain install "$toolchain" --profile minimal -c rustfmt -c clippy
rustup component add --toolchain "$toolchain" rustfmt clippy >/dev/null
rustup target add --toolchain "$toolchain" wasm32-unknown-unknown wasm32-wasip1 wasm32-wasip2 >/dev/null

apt_install() { # apt_install PACKAGE...
  local sudo=
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# Building wasmgate itself: protoc compiles etcd's protobuf API for the etcd
# client (crates/cluster), with protobuf's own protos (google/protobuf/*.proto,
# Debian's libprotobuf-dev); rustls's crypto (aws-lc-rs) and ring need a C compiler;
# mold links (.cargo/config.toml): the wasmtime-sized binaries link several
# times faster than with GNU ld.
build_pkgs=()
command -v mold >/dev/null || build_pkgs+=(mold)
command -v protoc >/dev/null || build_pkgs+=(protobuf-compiler)
[ -f /usr/include/google/protobuf/descriptor.proto ] || build_pkgs+=(libprotobuf-dev)
command -v cc >/dev/null || build_pkgs+=(gcc libc6-dev)
[ ${#build_pkgs[@]} -eq 0 ] || apt_install "${build_pkgs[@]}"

if [ "${1:-}" = "--demo" ]; then
  # The gateway demo's Go filter (plugins/proxy-wasm/go/add_header) is built
  # only when Go is there; its modules come from the Go module proxy.
  if command -v go >/dev/null; then
    (cd "$root/plugins/proxy-wasm/go/add_header" && go mod download)
  fi
  exit 0
fi

command -v go >/dev/null || { echo "error: Go (1.24 or newer) is required to build the Go plugins" >&2; exit 1; }
for mod in "$root"/plugins/go/*/ "$root"/plugins/proxy-wasm/go/*/ "$root"/reference/go-fiber/; do
  [ -f "$mod/go.mod" ] && (cd "$mod" && go mod download)
done
# Higress filters: go.sum pins the Higress modules, whose pseudo-versions the
# checksum database does not have; GONOSUMDB keeps go from asking it.
for mod in "$root"/plugins/higress/*/ "$root"/plugins/third_party/higress-plugins/*/; do
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
# with etcdctl.
command -v etcd >/dev/null || test_pkgs+=(etcd-server)
command -v etcdctl >/dev/null || test_pkgs+=(etcd-client)
# promtool (Debian's prometheus package) checks /metrics as Prometheus reads it
# (crates/cli/tests/e2e/trust.rs); the server it comes with is not started.
command -v promtool >/dev/null || test_pkgs+=(prometheus)
# Chromium for the dashboard's browser tests (tests/browser/, docs/dashboard.md),
# driven by Playwright for Python (installed below, pinned), which uses this
# Chromium instead of downloading its own browser.
command -v chromium >/dev/null || test_pkgs+=(chromium)
[ ${#test_pkgs[@]} -eq 0 ] || apt_install "${test_pkgs[@]}"

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
[ ${#sdk_pkgs[@]} -eq 0 ] || apt_install "${sdk_pkgs[@]}"

# h2spec, HTTP/2 conformance against the TLS listener (crates/cli/tests/e2e/tls.rs),
# built from the module pinned in tools/h2spec into target/test-bin;
# curl (HTTP/2 by ALPN, --resolve for SNI) and Python's ssl module drive the
# other TLS tests.
command -v curl >/dev/null || apt_install curl
# `ip` finds the address the Kubernetes tests' upstreams listen on.
command -v ip >/dev/null || apt_install iproute2
if [ ! -x "$root/target/test-bin/h2spec" ]; then
  mkdir -p "$root/target/test-bin"
  (cd "$root/tools/h2spec" && go build -o "$root/target/test-bin/h2spec" github.com/summerwind/h2spec/cmd/h2spec)
fi

# Jaeger v1.76.0 (OTLP receiver, in-memory storage, query API), the tracing
# tests' collector (crates/cli/tests/e2e/tracing.rs), built from the module
# pinned in tools/jaeger (about four minutes on two cores, downloads
# included): a real backend, not a stand-in for one.
if [ ! -x "$root/target/test-bin/jaeger" ]; then
  mkdir -p "$root/target/test-bin"
  (cd "$root/tools/jaeger" && go build -o "$root/target/test-bin/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger)
fi

# The OCI registry of CNCF distribution v3.1.2 and oras v1.3.6, for the OCI
# plugin tests (crates/cli/tests/e2e/oci.rs): a real registry, with and without
# htpasswd, and the client users push plugins with; built from the modules
# pinned in tools/registry and tools/oras into target/test-bin.
for tool in registry:github.com/distribution/distribution/v3/cmd/registry oras:oras.land/oras/cmd/oras; do
  name=${tool%%:*}
  if [ ! -x "$root/target/test-bin/$name" ]; then
    mkdir -p "$root/target/test-bin"
    (cd "$root/tools/$name" && go build -o "$root/target/test-bin/$name" "${tool#*:}")
  fi
done

# kube-apiserver v1.34.2 (the Kubernetes tests, crates/cli/tests/e2e/kubernetes.rs,
# run it on a local etcd as envtest does), built from the module pinned in
# tools/kube-apiserver (about 3 minutes on two cores); and the Gateway API
# v1.5.1 CRDs (standard channel), from the Go module sigs.k8s.io/gateway-api.
if [ ! -x "$root/target/test-bin/kube-apiserver" ]; then
  mkdir -p "$root/target/test-bin"
  (cd "$root/tools/kube-apiserver" && CGO_ENABLED=0 go build -o "$root/target/test-bin/kube-apiserver" \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v1.34.2 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=34" \
    k8s.io/kubernetes/cmd/kube-apiserver)
fi
crds="$root/target/test-bin/gateway-api-crds"
if [ ! -f "$crds/gateway.networking.k8s.io_httproutes.yaml" ]; then
  module=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json sigs.k8s.io/gateway-api@v1.5.1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$crds"
  cp "$module"/config/crd/standard/gateway.networking.k8s.io_*.yaml "$crds/"
  chmod u+w "$crds"/*.yaml
fi

# Playwright for Python, pinned; only its driver is used (no browser download).
python3 -c 'import playwright, importlib.metadata as m; assert m.version("playwright") == "1.65.2"' 2>/dev/null ||
  python3 -m pip install --quiet --disable-pip-version-check playwright==1.65.2

# WebSocket and gRPC clients and servers of the protocol tests
# (crates/cli/tests/e2e/protocols.rs), pinned.
python3 -c 'import importlib.metadata as m; assert m.version("websockets") == "17.4" and m.version("grpcio") == "1.85.3"' 2>/dev/null ||
  python3 -m pip install --quiet --disable-pip-version-check websockets==17.4 grpcio==1.85.3

# componentize-py, pinned: builds the Python wasi:http/proxy component
# (plugins/component/python) with the CPython it carries.
python3 -c 'import importlib.metadata as m; assert m.version("componentize-py") == "0.25.1"' 2>/dev/null ||
  python3 -m pip install --quiet --disable-pip-version-check componentize-py==0.25.1

if [ "${1:-}" = "--bench" ]; then
  need=()
  # valgrind: bench/instructions.sh counts instructions under callgrind.
  for tool in wrk nginx valgrind; do command -v "$tool" >/dev/null || need+=("$tool"); done
  # testssl.sh: bench/tls_scan.py scans the TLS listeners with it (its command
  # is `testssl`).
  command -v testssl >/dev/null || need+=(testssl.sh)
  [ ${#need[@]} -eq 0 ] || apt_install "${need[@]}"
  # bench/db.sh: Toxiproxy (the emulated network round trip, built from source
  # into target/bench-bin) and the modules of its Go + pgx reference.
  if [ ! -x "$root/target/bench-bin/toxiproxy-server" ]; then
    mkdir -p "$root/target/bench-bin"
    GOBIN="$root/target/bench-bin" go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0
    mv "$root/target/bench-bin/server" "$root/target/bench-bin/toxiproxy-server"
  fi
  (cd "$root/reference/go-pgx" && go mod download)
  # bench/components.py: `wasmtime serve` of wasmtime-cli 48.0.8 (the runtime
  # version wasmgate pins), from crates.io with its own lockfile, into
  # target/bench-bin (about 12 minutes on two cores, in its own target dir).
  if [ ! -x "$root/target/bench-bin/bin/wasmtime" ]; then
    CARGO_TARGET_DIR="$root/target/wasmtime-cli-build" \
      cargo install wasmtime-cli --version 48.0.8 --locked --root "$root/target/bench-bin"
  fi
  # bench/protocols.py: the Go peers' modules; the plots of the bench scripts.
  (cd "$root/bench/protopeers" && go mod download)
  python3 -c 'import matplotlib' 2>/dev/null || python3 -m pip install --quiet --disable-pip-version-check matplotlib==3.10.7
fi
