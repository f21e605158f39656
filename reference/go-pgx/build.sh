#!/usr/bin/env bash
# Builds the database benchmark's Go reference into target/reference/gopgx.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$here/../../target/reference"
cd "$here" && go build -o "$here/../../target/reference/gopgx" .
