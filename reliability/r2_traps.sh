#!/usr/bin/env bash
# R2: faults.wasm `trap_sometimes` (input n traps when n % 10 == 0) gets
# n = 0..N-1 (default 1000) from 4 keep-alive clients, on `wasmgate serve` and
# on a gateway function route. Pass: exactly the n % 10 == 0 requests fail,
# each with 500 and a crash report naming explode_on_purpose / trap_sometimes
# with file:line; every other request answers 200 "ok n"; the server logs one
# crash report per trap; trapped instances are replaced (pool of ONE instance:
# a trapped instance that leaked its slot would turn every later request into
# a 503; on the gateway, wasmgate_plugin_restarts_total counts the
# replacements when the build exposes it).
# Usage: [REQUESTS=1000] reliability/r2_traps.sh
source "$(dirname "$0")/lib.sh"
n="${REQUESTS:-1000}"

cat >"$TMP/r2.py" <<'PY'
import json, sys, threading
from relib import request
url, count, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
import http.client, urllib.parse
u = urllib.parse.urlsplit(url)
results = {}
lock = threading.Lock()
def worker(k):
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    for i in range(k, count, 4):
        status, hdrs, body, took, err = request(url, "POST", str(i).encode(), conn=conn, timeout=10)
        if err:
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        with lock:
            results[i] = (status, body.decode("utf-8", "replace"), took, err)
ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]

bad = []          # deviations, one line each
failed, ok, reports = [], 0, 0
times = {"trap": [], "ok": []}
for i in range(count):
    status, body, took, err = results[i]
    expect_trap = i % 10 == 0
    if expect_trap:
        times["trap"].append(took)
        failed.append(i)
        if status != 500:
            bad.append(f"n={i}: expected 500, got {status} {err or body[:200]}")
            continue
        try:
            e = json.loads(body)["error"]
        except Exception:
            bad.append(f"n={i}: 500 without a JSON crash report: {body[:200]}")
            continue
        frames = e.get("backtrace") or []
        named = [f for f in frames if "explode_on_purpose" in (f.get("function") or "")
                 and (f.get("file") or "").endswith("faults/src/lib.rs") and isinstance(f.get("line"), int)]
        outer = [f for f in frames if (f.get("function") or "") == "trap_sometimes" and isinstance(f.get("line"), int)]
        if e.get("kind") != "trap" or e.get("function") != "trap_sometimes" or not named or not outer:
            bad.append(f"n={i}: crash report lacks kind/function/file:line: {body[:300]}")
            continue
        reports += 1
        if reports == 1:
            f = named[0]
            first = f"{e['kind']} in {e['function']}: {e['message']}; frame {f['function']} at {f['file']}:{f['line']}:{f.get('column')}"
    else:
        times["ok"].append(took)
        if status == 200 and body == f"ok {i}":
            ok += 1
        else:
            bad.append(f"n={i}: expected 200 'ok {i}', got {status} {err or body[:200]}")
from relib import percentile
json.dump({"requests": count, "ok": ok, "trapped": len(failed), "reports": reports, "bad": bad,
           "first_report": first if reports else None,
           "trap_p50_ms": round(percentile(times["trap"], 50) * 1000, 2),
           "ok_p50_ms": round(percentile(times["ok"], 50) * 1000, 2)}, open(out, "w"))
PY

# summarize TAG JSON: the checks for one run of r2.py.
summarize() {
  local tag="$1" json="$2" ok trapped reports bad
  read -r ok trapped reports bad < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["ok"], d["trapped"], d["reports"], len(d["bad"]))' "$json")
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); [print("    " + b) for b in d["bad"][:10]]; print("    first crash report:", d["first_report"]); print("    latency p50: ok %s ms, trap %s ms" % (d["ok_p50_ms"], d["trap_p50_ms"]))' "$json"
  check "$tag: every n % 10 != 0 answered 200 'ok n'" "$([ "$ok" = $((n - (n + 9) / 10)) ]; echo $?)" "$ok of $((n - (n + 9) / 10))"
  check "$tag: every n % 10 == 0 failed with 500 + crash report (function, file:line)" "$([ "$reports" = $(((n + 9) / 10)) ]; echo $?)" "$reports of $(((n + 9) / 10))"
  check "$tag: no other deviation" "$([ "$bad" = 0 ]; echo $?)" "$bad deviations"
  R_OK="$ok" R_REPORTS="$reports"
}

# --- serve, one instance
port="$(free_port)"
start serve "$WASMGATE" serve "$WASM/faults.wasm" trap_sometimes --port "$port" --pool-size 1 --queue-timeout-ms 5000
serve_pid=$LAST_PID
wait_port "$port" "$serve_pid"
echo "  serve: $n POSTs n=0..$((n - 1)), 4 clients, --pool-size 1"
timeout 300 python3 "$TMP/r2.py" "http://127.0.0.1:$port/" "$n" "$TMP/serve.json"
summarize serve "$TMP/serve.json"
serve_ok=$R_OK serve_reports=$R_REPORTS
# A report names the request it failed (`failed (trap, request N)`).
logged="$(grep -cE 'function `trap_sometimes` failed \(trap(, request [0-9]+)?\)' "$TMP/serve.log" || true)"
# Crash reports name functions demangled (faults::explode_on_purpose) since
# 01b2c42; the mangled form is accepted too.
lines="$(grep -cE 'at (faults::|_ZN6faults18)explode_on_purpose.*\(.*faults/src/lib.rs:[0-9]+:[0-9]+\)' "$TMP/serve.log" || true)"
check "serve: log has one crash report per trap, with explode_on_purpose file:line" "$([ "$logged" = $(((n + 9) / 10)) ] && [ "$lines" = "$logged" ]; echo $?)" "$logged reports, $lines with file:line"
grep -m1 -oE 'at (faults::|_ZN6faults18)explode_on_purpose[^ ]* \([^)]*\)' "$TMP/serve.log" | sed 's/^/    log: /' || true
kill -0 "$serve_pid" 2>/dev/null
check "serve: still running" $? ""

# --- gateway function route, one instance, admin metrics
gw="$(free_port)"
admin="$(free_port)"
# error_details: the answers carry the crash reports R2 checks (by default
# they stay in the log and /plugins/{name}/status: crates/cli/tests/e2e/trust.rs).
cat >"$TMP/gateway.yaml" <<EOF
listen: 127.0.0.1:$gw
admin: 127.0.0.1:$admin
error_details: true
plugins:
  - {name: faults, wasm: $WASM/faults.wasm, pool_size: 1, queue_timeout_ms: 5000}
routes:
  - {name: traps, path: {exact: /trap_sometimes}, function: {plugin: faults}}
EOF
start gateway "$WASMGATE" run -c "$TMP/gateway.yaml" --no-watch
gw_pid=$LAST_PID
wait_port "$gw" "$gw_pid"
echo "  gateway: $n POSTs to a function route, pool_size 1"
timeout 300 python3 "$TMP/r2.py" "http://127.0.0.1:$gw/trap_sometimes" "$n" "$TMP/gateway.json"
summarize gateway "$TMP/gateway.json"
curl -sf -m 5 "http://127.0.0.1:$admin/metrics" >"$TMP/metrics.txt" || true
restarts="$(awk '/^wasmgate_plugin_restarts_total\{plugin="faults"/ {print $2}' "$TMP/metrics.txt")"
created="$(awk '/^wasmgate_plugin_instances_created_total\{plugin="faults"/ {print $2}' "$TMP/metrics.txt")"
traps="$(awk '/^wasmgate_plugin_failures_total\{plugin="faults".*kind="trap"/ {print $2}' "$TMP/metrics.txt")"
if [ -n "$restarts" ]; then
  check "gateway: wasmgate_plugin_restarts_total = traps" "$([ "$restarts" = $(((n + 9) / 10)) ]; echo $?)" "restarts $restarts, instances created ${created:-?}, traps counted ${traps:-?}"
  check "gateway: instances created = restarts + the live one" "$([ "${created:-0}" = $((restarts + 1)) ]; echo $?)" "${created:-?}"
else
  echo "    (this build exposes no wasmgate_plugin_restarts_total: replacement shown by the one-instance pool only)"
fi
# The plugin's status page keeps the last crash report (builds with the admin API of issue 4).
if curl -sf -m 5 "http://127.0.0.1:$admin/plugins/faults/status" >"$TMP/status.json" 2>/dev/null; then
  read -r where < <(python3 - "$TMP/status.json" <<'PY'
import json, sys
def walk(v):
    if isinstance(v, dict):
        if "explode_on_purpose" in str(v.get("function", "")) and v.get("line") is not None:
            yield f'{v["function"]} at {v.get("file")}:{v["line"]}'
        for x in v.values():
            yield from walk(x)
    elif isinstance(v, list):
        for x in v:
            yield from walk(x)
print(next(walk(json.load(open(sys.argv[1]))), "none"))
PY
  )
  check "gateway: GET /plugins/faults/status has the last crash report with file:line" "$([ "$where" != none ]; echo $?)" "$where"
fi
kill -0 "$gw_pid" 2>/dev/null
check "gateway: still running" $? ""

finish R2 "$n requests each: serve $serve_ok ok / $serve_reports traps with crash report; gateway $R_OK ok / $R_REPORTS traps${restarts:+, $restarts instances replaced}"
