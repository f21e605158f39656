#!/usr/bin/env bash
# Builds every guest plugin from source into target/wasm/ (repo root).
# Safe to run again; needs rustup and Go (see ../scripts/install-deps.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/../target/wasm"
mkdir -p "$out"

rustup target add --toolchain "$(sed -n 's/^channel = "\(.*\)"/\1/p' "$here/rust-toolchain.toml")" \
  wasm32-unknown-unknown wasm32-wasip1 >/dev/null

cd "$here"
cargo build --release --target wasm32-unknown-unknown -p hello -p count_vowels -p bench -p reflect -p capabilities
# Extism plugins on the wasmgate guest library (guest/rust, wasmgate-pdk): the
# services example. Its Go twin, go/orders (guest/go), is built by the go/*/ loop.
cargo build --release --target wasm32-unknown-unknown -p orders
cp target/wasm32-unknown-unknown/release/orders.wasm "$out/orders.wasm"
cargo build --release --target wasm32-wasip1 -p faults
# Proxy-Wasm filters (proxy-wasm Rust SDK).
cargo build --release --target wasm32-wasip1 -p add_header -p fault_injection -p shared_state \
  -p http_body -p http_config -p http_auth_random -p json_validation -p tick -p shared_queue -p metrics -p postpone_requests -p properties -p trailers
for p in hello count_vowels bench reflect capabilities; do
  cp "target/wasm32-unknown-unknown/release/$p.wasm" "$out/$p.wasm"
done
for p in faults add_header fault_injection shared_state \
  http_body http_config http_auth_random json_validation tick shared_queue metrics postpone_requests properties trailers; do
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
ls -l "$out"
