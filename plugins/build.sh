#!/usr/bin/env bash
# Builds every guest plugin from source into target/wasm/ (repo root).
# Safe to run again; needs rustup and Go (see ../scripts/install-deps.sh).
# With --demo, only what `make demo` and `make demo-gateway` run.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/../target/wasm"
mkdir -p "$out"

rustup target add --toolchain "$(sed -n 's/^channel = "\(.*\)"/\1/p' "$here/rust-toolchain.toml")" \
  wasm32-unknown-unknown wasm32-wasip1 wasm32-wasip2 >/dev/null

cd "$here"
# `plugins/build.sh --demo`: only the demos' plugins (make demo, make
# demo-gateway): hello, two Rust filters, and the Go filter when Go is there.
if [ "${1:-}" = "--demo" ]; then
  cargo build --release --target wasm32-unknown-unknown -p hello
  cp target/wasm32-unknown-unknown/release/hello.wasm "$out/hello.wasm"
  cargo build --release --target wasm32-wasip1 -p add_header -p fault_injection
  for p in add_header fault_injection; do cp "target/wasm32-wasip1/release/$p.wasm" "$out/$p.wasm"; done
  if command -v go >/dev/null; then
    (cd proxy-wasm/go/add_header && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$out/go_add_header.wasm" .)
  fi
  exit 0
fi
cargo build --release --target wasm32-unknown-unknown -p hello -p count_vowels -p bench -p reflect -p capabilities
# Extism plugins on the wasmgate guest library (guest/rust, wasmgate-pdk): the
# services example. Its Go twin, go/orders (guest/go), is built by the go/*/ loop.
cargo build --release --target wasm32-unknown-unknown -p orders
cp target/wasm32-unknown-unknown/release/orders.wasm "$out/orders.wasm"
cargo build --release --target wasm32-wasip1 -p faults
# Proxy-Wasm filters (proxy-wasm Rust SDK).
cargo build --release --target wasm32-wasip1 -p add_header -p fault_injection -p shared_state \
  -p http_body -p http_config -p http_auth_random -p json_validation -p tick -p shared_queue -p metrics -p postpone_requests -p properties -p trailers -p metric_names -p grpc_call
for p in hello count_vowels bench reflect capabilities; do
  cp "target/wasm32-unknown-unknown/release/$p.wasm" "$out/$p.wasm"
done
for p in faults add_header fault_injection shared_state \
  http_body http_config http_auth_random json_validation tick shared_queue metrics postpone_requests properties trailers metric_names grpc_call; do
  cp "target/wasm32-wasip1/release/$p.wasm" "$out/$p.wasm"
done

command -v go >/dev/null || { echo "error: Go is needed for the Go plugins (go/)" >&2; exit 1; }
for dir in "$here"/go/*/ "$here"/proxy-wasm/go/*/; do
  name="go_$(basename "$dir")"
  (cd "$dir" && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$out/$name.wasm" .)
done
# Higress filters (higress/): Higress's wasm-go framework on its proxy-wasm-go-sdk
# fork (ABI proxy_abi_version_0_2_100, with the Redis extension). go.sum pins
# every module; the Higress pseudo-versions are missing from the checksum
# database, so GONOSUMDB keeps go from asking it about them.
for dir in "$here"/higress/*/; do
  [ -f "$dir/go.mod" ] || continue
  name="higress_$(basename "$dir")"
  (cd "$dir" && GOOS=wasip1 GOARCH=wasm GONOSUMDB='github.com/higress-group/*' \
    go build -mod=readonly -buildmode=c-shared -o "$out/$name.wasm" .)
done

# Higress's own plugins, unchanged (third_party/higress-plugins/README.md): each
# with its own go.mod and go.sum.
for dir in "$here"/third_party/higress-plugins/*/; do
  [ -f "$dir/go.mod" ] || continue
  name="higress_plugin_$(basename "$dir")"
  (cd "$dir" && GOOS=wasip1 GOARCH=wasm GONOSUMDB='github.com/higress-group/*' \
    go build -mod=readonly -buildmode=c-shared -o "$out/$name.wasm" .)
done

# wasi:http/proxy components (WASI 0.2.12, exporting wasi:http/incoming-handler),
# the same paths in Rust, Python and JavaScript. Rust: the wasip2 crate 1.0.4
# (the `wasi` crate's successor) for wasm32-wasip2, where rustc links the component.
cargo build --release --target wasm32-wasip2 -p http_handler
cp target/wasm32-wasip2/release/http_handler.wasm "$out/component_rust.wasm"

# Plugins from the other SDKs of docs/compatibility.md (tests:
# crates/cli/tests/e2e/sdk_compat.rs). Toolchains from scripts/install-deps.sh:
# Node/npm, Debian's emscripten, clang and lld. Each module is one command, run
# only when its output is missing or older than one of its inputs (this
# script included), so a second `make plugins` skips them.
stale() { # stale OUTPUT INPUT...
  [ -e "$1" ] || return 0
  local output=$1
  shift
  [ -n "$(find "$@" "$here/build.sh" -newer "$output" -print -quit)" ]
}
need() { # need TOOL WHAT
  command -v "$1" >/dev/null || { echo "error: $1 is needed for $2 (scripts/install-deps.sh)" >&2; exit 1; }
}
# npm ci from the lockfile (exact versions), unless node_modules already
# holds that lockfile's install.
npm_ci() {
  [ "$1/node_modules/.package-lock.json" -nt "$1/package-lock.json" ] && return
  (cd "$1" && npm ci --no-audit --no-fund --loglevel=error)
}
# AssemblyScript, Proxy-Wasm: @solo-io/proxy-runtime 0.1.8 on AssemblyScript
# 0.14.13 (package-lock.json); one module, a filter per root id. The flags are
# the package's `build` script.
as_filters=proxy-wasm/assemblyscript/filters
if stale "$out/as_filters.wasm" "$here/$as_filters/assembly" "$here/$as_filters/package-lock.json"; then
  need npm "the AssemblyScript plugins"
  npm_ci "$here/$as_filters"
  (cd "$here/$as_filters" && npm run --silent build)
fi
# AssemblyScript, Extism: @extism/as-pdk 1.0.0 on AssemblyScript 0.27.37.
as_hello=extism/assemblyscript
if stale "$out/as_hello.wasm" "$here/$as_hello/assembly" "$here/$as_hello/package-lock.json"; then
  need npm "the AssemblyScript plugins"
  npm_ci "$here/$as_hello"
  (cd "$here/$as_hello" && npm run --silent build)
fi
# C++, Proxy-Wasm: the C++ SDK (third_party/proxy-wasm-cpp-sdk, no protobuf)
# with Debian's emscripten 3.1.6, the SDK's own compile and link options except
# -sINITIAL_HEAP=64KB, which that emscripten does not know. In its place, a
# 64 KB stack and 256 KB of memory at start (3.1.6 defaults to a 5 MB stack in
# 16 MB), which grows as the filter needs.
cpp_sdk="$here/third_party/proxy-wasm-cpp-sdk"
if stale "$out/cpp_filters.wasm" "$here/proxy-wasm/cpp/filters" "$cpp_sdk"; then
  need em++ "the C++ Proxy-Wasm filters"
  em++ --std=c++17 -O3 -flto --no-entry --js-library "$cpp_sdk/proxy_wasm_intrinsics.js" \
    -sSTANDALONE_WASM -sEXPORTED_FUNCTIONS=_malloc -sALLOW_MEMORY_GROWTH=1 \
    -sTOTAL_STACK=64KB -sINITIAL_MEMORY=256KB \
    -I"$cpp_sdk" "$cpp_sdk/proxy_wasm_intrinsics.cc" "$here/proxy-wasm/cpp/filters/filters.cc" \
    -o "$out/cpp_filters.wasm"
fi
# C, Extism: the C PDK (third_party/extism-c-pdk, header only) with clang and
# lld, wasm32 without a libc; -mbulk-memory lets clang turn copy loops into
# memory.copy instead of calls to a memcpy that is not there.
c_pdk="$here/third_party/extism-c-pdk"
if stale "$out/c_hello.wasm" "$here/extism/c" "$c_pdk"; then
  need clang "the C Extism plugin"
  clang --target=wasm32-unknown-unknown -O2 -mbulk-memory -nostdlib -Wl,--no-entry -Wall \
    -I"$c_pdk" "$here/extism/c/hello.c" -o "$out/c_hello.wasm"
fi
# wasi:http/proxy components, Python and JavaScript (the Rust one is above),
# on the WIT of plugins/component/python/wit: wasi:http 0.2.12 from the
# wasmtime-wasi-http 48.0.8 crate. Python: componentize-py 0.25.1 (pip, from
# scripts/install-deps.sh), CPython in the component, about 10 s.
component_check() { # component_check WASM: a component (not a core module) exporting the handler
  [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 0061736d0d000100 ] && grep -qa 'wasi:http/incoming-handler@0.2' "$1" ||
    { echo "error: $1 is not a wasi:http/proxy component" >&2; exit 1; }
}
component_check "$out/component_rust.wasm"
py_component="$here/component/python"
if stale "$out/component_python.wasm" "$py_component/app.py" "$py_component/wit"; then
  need componentize-py "the Python component"
  (cd "$py_component" && componentize-py -q -d wit -w python-handler componentize app -o "$out/component_python.wasm")
  component_check "$out/component_python.wasm"
fi
# JavaScript: ComponentizeJS 0.23.0 (StarlingMonkey, wizer from npm; jco 1.35.0
# for inspecting components), package-lock.json; no AOT (weval would be
# downloaded from GitHub). About 25 s.
js_component="$here/component/js"
if stale "$out/component_js.wasm" "$js_component/app.js" "$js_component/package-lock.json" "$py_component/wit"; then
  need npm "the JavaScript component"
  npm_ci "$js_component"
  (cd "$js_component" && npm run --silent build)
  component_check "$out/component_js.wasm"
fi
ls -l "$out"
