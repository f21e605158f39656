#!/usr/bin/env bash
# Unit tests of the Higress filters, with wasm-go's test host (pkg/test):
# each test runs twice, natively ("go" mode, the SDK's host emulator) and on
# the built module in wazero ("wasm" mode). Builds each filter first, into
# target/wasm/ (as plugins/build.sh does), and tests that file.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/../../target/wasm"
mkdir -p "$out"
export GONOSUMDB='github.com/higress-group/*'
for dir in "$here"/*/; do
  [ -f "$dir/go.mod" ] || continue
  name="higress_$(basename "$dir")"
  (cd "$dir" \
    && GOOS=wasip1 GOARCH=wasm go build -mod=readonly -buildmode=c-shared -o "$out/$name.wasm" . \
    && go vet -mod=readonly ./... \
    && WASM_FILE_PATH="$out/$name.wasm" go test -mod=readonly -count=1 ./...)
done
