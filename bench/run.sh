#!/usr/bin/env bash
# `make bench`: every benchmark side by side, then the tables and plots.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cargo build --release -p wasmgate-extism --example inprocess_bench -p wasmgate-gateway --example native_hello --example native_orders
reference/go-fiber/build.sh
reference/go-pgx/build.sh
python3 -c "import matplotlib" 2>/dev/null || pip install -q matplotlib || true
bench/inprocess.sh 3
bench/http.py --rounds 3 --seconds 8
bench/report.py
ROUNDS=3 SECONDS=5 bench/gateway.sh
bench/gateway_report.py
ROUNDS=3 SECONDS=5 bench/db.sh
bench/db_report.py
bench/instructions.sh
bench/instructions_report.py
bench/tls.py --rounds 3 --seconds 5
bench/tls_scan.py
