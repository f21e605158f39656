#!/usr/bin/env bash
# Builds the reference server into target/reference/gofiber.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$here/../../target/reference"
cd "$here" && go build -o "$here/../../target/reference/gofiber" .
