#!/usr/bin/env bash
# Everything a fresh machine needs beyond Rust (rustup) and Go: the pinned
# toolchain's wasm targets and the Go modules of the plugins. With `--bench`
# also the load generator and nginx used by `make bench`.
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

if [ "${1:-}" = "--bench" ]; then
  need=()
  for tool in wrk nginx; do command -v "$tool" >/dev/null || need+=("$tool"); done
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
fi
