#!/usr/bin/env bash
# R3: a plugin stuck in an infinite loop. A gateway with an Extism function
# route to faults.wasm `spin` (timeout_ms TIMEOUT_MS, default 1000) and a
# normal function route (hello.wasm), 2 worker threads. The hello route's
# latency is measured with wrk (4 connections, SECONDS s, default 6) alone,
# then while N clients keep a spin request in flight at all times, for each N
# in SPINNERS (default "1 2": one stuck request; one per worker thread).
# Pass: every spin request ends with 504 `timeout` at its deadline (within
# +SLACK_MS, default 250 ms); hello answers without errors; hello's p50 and
# p99 under spin stay close to the baseline: at most RATIO_MAX (default 3)
# times it, or at most ABS_MAX_MS (default 1 ms, one epoch tick) above it.
# The baseline is measured before and after the spin runs; the lower counts.
# Also checked: the spin calls moved to the slow lane (wasmgate_long_calls_moved_total).
# For reference (no check), hello is also measured under K idle-class shell
# loops (chrt -i 0), for each K in FLOOR_LOOPS (default "1 2"): the latency the
# kernel gives when K cores run idle-priority work, whatever that work is.
# LONG_CALL_THREADS sets limits.long_call_threads (default: unset, one per CPU but one),
# LONG_CALL_NICE limits.long_call_nice (default: unset, 3).
# Usage: [SECONDS=6] [SPINNERS="1 2"] [TIMEOUT_MS=1000] [LONG_CALL_THREADS=N] [LONG_CALL_NICE=N] [FLOOR_LOOPS="1 2"] reliability/r3_spin.sh
source "$(dirname "$0")/lib.sh"
dur="$(tr '\0' '\n' </proc/$$/environ | sed -n 's/^SECONDS=//p')" # bash's own SECONDS is a clock
dur="${dur:-6}"
spinner_counts="${SPINNERS:-1 2}"
deadline_ms="${TIMEOUT_MS:-1000}"
slack_ms="${SLACK_MS:-250}"
ratio_max="${RATIO_MAX:-3}"
abs_max_ms="${ABS_MAX_MS:-1}"
floor_loops="${FLOOR_LOOPS-1 2}"
long_call_limits=()
[ -n "${LONG_CALL_THREADS:-}" ] && long_call_limits+=("long_call_threads: $LONG_CALL_THREADS")
[ -n "${LONG_CALL_NICE:-}" ] && long_call_limits+=("long_call_nice: $LONG_CALL_NICE")
long_call_limit=""
[ ${#long_call_limits[@]} -gt 0 ] && long_call_limit="limits: {$(IFS=,; echo "${long_call_limits[*]}")}"
command -v wrk >/dev/null || { echo "wrk is missing: scripts/install-deps.sh --bench" >&2; exit 2; }

gw="$(free_port)"
admin="$(free_port)"
cat >"$TMP/gateway.yaml" <<EOF
listen: 127.0.0.1:$gw
admin: 127.0.0.1:$admin
plugins:
  - {name: faults, wasm: $WASM/faults.wasm, timeout_ms: $deadline_ms, pool_size: 16}
  - {name: hello, wasm: $WASM/hello.wasm}
routes:
  - {name: spin, path: {exact: /spin}, function: {plugin: faults}}
  - {name: hello, path: {exact: /hello}, function: {plugin: hello}}
$long_call_limit
EOF
start gateway "$WASMGATE" run -c "$TMP/gateway.yaml" --no-watch --log-level error
gw_pid=$LAST_PID
wait_port "$gw" "$gw_pid"
body="$(curl -sf -m 5 -X POST "http://127.0.0.1:$gw/hello" -d 'John Doe')"
check "hello route answers" "$([ "$body" = '{"message":"Hello John Doe"}' ]; echo $?)" "$body"
cat >"$TMP/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = "John Doe"
LUA

measure() { # name
  timeout $((dur + 30)) wrk -t1 -c4 -d"${dur}s" --timeout 10s --latency -s "$TMP/post.lua" "http://127.0.0.1:$gw/hello" >"$TMP/wrk-$1.txt" 2>&1 || true
  sed 's/^/    /' "$TMP/wrk-$1.txt"
}

# Warm-up (instances, caches), then the baseline.
wrk -t1 -c4 -d1s -s "$TMP/post.lua" "http://127.0.0.1:$gw/hello" >/dev/null 2>&1 || true
echo "  baseline: wrk -t1 -c4 -d${dur}s --latency -s post.lua http://127.0.0.1:$gw/hello"
measure baseline
read -r b_rps b_p50 b_p99 b_reqs b_non2xx b_sock < <(wrk_summary "$TMP/wrk-baseline.txt")
baseline_after_spin() { # a second baseline after the spin runs: the lower one counts (a noisy first baseline must not widen the tolerance)
  echo "  baseline again, no spin load: same wrk"
  measure baseline2
  local rps p50 p99 reqs non2xx sock
  read -r rps p50 p99 reqs non2xx sock < <(wrk_summary "$TMP/wrk-baseline2.txt")
  echo "    baselines: p50 $b_p50 / $p50 ms, p99 $b_p99 / $p99 ms, $b_rps / $rps req/s"
}

# Spin clients: each keeps one spin request in flight until the stop file appears.
cat >"$TMP/spin.py" <<'PY'
import json, os, sys, threading, time
from relib import request
url, n, stop, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
res, lock = [], threading.Lock()
def loop():
    while not os.path.exists(stop):
        status, _, body, took, err = request(url, "POST", b"", timeout=30)
        try:
            kind = json.loads(body)["error"]["kind"]
        except Exception:
            kind = err or body[:100].decode("utf-8", "replace")
        with lock:
            res.append({"status": status, "kind": kind, "ms": round(took * 1000, 1)})
ts = [threading.Thread(target=loop) for _ in range(n)]
[t.start() for t in ts]; [t.join() for t in ts]
json.dump(res, open(out, "w"))
PY
moved_calls() { curl -sf -m 5 "http://127.0.0.1:$admin/metrics" | awk '$1 == "wasmgate_long_calls_moved_total" {print $2}'; }
summary=""
for spinners in $spinner_counts; do
  moved_before="$(moved_calls)"
  rm -f "$TMP/stop" "$TMP/spin.json"
  start "spinners-$spinners" timeout $((dur + 60)) python3 "$TMP/spin.py" "http://127.0.0.1:$gw/spin" "$spinners" "$TMP/stop" "$TMP/spin.json"
  spin_pid=$LAST_PID
  sleep 0.5
  echo "  under spin ($spinners client(s) looping POST /spin): same wrk"
  measure "spin$spinners"
  read -r s_rps s_p50 s_p99 s_reqs s_non2xx s_sock < <(wrk_summary "$TMP/wrk-spin$spinners.txt")
  touch "$TMP/stop"
  for _ in $(seq 100); do kill -0 "$spin_pid" 2>/dev/null || break; sleep 0.1; done
  wait "$spin_pid" 2>/dev/null || true

  read -r spins s504 in_window min_ms max_ms < <(python3 - "$TMP/spin.json" "$deadline_ms" "$slack_ms" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); d, slack = float(sys.argv[2]), float(sys.argv[3])
ok = [x for x in r if x["status"] == 504 and x["kind"] == "timeout"]
inw = [x for x in ok if d <= x["ms"] <= d + slack]
ms = [x["ms"] for x in r] or [0]
others = {}
for x in r:
    if not (x["status"] == 504 and x["kind"] == "timeout"):
        others[f'{x["status"]} {x["kind"]}'] = others.get(f'{x["status"]} {x["kind"]}', 0) + 1
if others:
    print("other answers:", others, file=sys.stderr)
print(len(r), len(ok), len(inw), min(ms), max(ms))
PY
  )
  t="$spinners spinning"
  check "$t: spin requests made" "$([ "$spins" -ge "$spinners" ]; echo $?)" "$spins"
  check "$t: every spin request answered 504 timeout" "$([ "$s504" = "$spins" ]; echo $?)" "$s504 of $spins"
  check "$t: every spin request ended at its deadline (${deadline_ms}..$((deadline_ms + slack_ms)) ms)" "$([ "$in_window" = "$spins" ]; echo $?)" "durations $min_ms..$max_ms ms"
  moved=$(( $(moved_calls) - moved_before ))
  check "$t: every spin call moved to the slow lane" "$([ "$moved" -ge "$spins" ]; echo $?)" "$moved moved, $spins spin requests"
  check "$t: hello without errors" "$([ "$((s_non2xx + s_sock + b_non2xx + b_sock))" = 0 ]; echo $?)" "baseline $((b_non2xx + b_sock)), under spin $((s_non2xx + s_sock))"
  eval "s_${spinners}=(\"\$s_rps\" \"\$s_p50\" \"\$s_p99\" \"\$s504\" \"\$spins\" \"\$min_ms\" \"\$max_ms\")"
done
baseline_after_spin
read -r b_p50 b_p99 b_rps < <(python3 -c 'import sys; a = list(map(float, sys.argv[1:])); print(min(a[0], a[3]), min(a[1], a[4]), max(a[2], a[5]))' "$b_p50" "$b_p99" "$b_rps" \
  $(wrk_summary "$TMP/wrk-baseline2.txt" | awk '{print $2, $3, $1}'))
for spinners in $spinner_counts; do
  t="$spinners spinning"
  eval "s_rps=\${s_${spinners}[0]} s_p50=\${s_${spinners}[1]} s_p99=\${s_${spinners}[2]} s504=\${s_${spinners}[3]} spins=\${s_${spinners}[4]} min_ms=\${s_${spinners}[5]} max_ms=\${s_${spinners}[6]}"
  read -r r50 r99 rrps ok50 ok99 < <(python3 -c '
import sys
b50, b99, s50, s99, brps, srps, rmax, amax = map(float, sys.argv[1:])
close = lambda b, s: s <= b * rmax or s - b <= amax
print("%.1f %.1f %.2f %d %d" % (s50 / b50, s99 / b99, srps / brps, close(b50, s50), close(b99, s99)))' "$b_p50" "$b_p99" "$s_p50" "$s_p99" "$b_rps" "$s_rps" "$ratio_max" "$abs_max_ms")
  check "$t: hello p50 stays close (<= ${ratio_max}x or +${abs_max_ms} ms)" "$([ "$ok50" = 1 ]; echo $?)" "baseline $b_p50 ms, under spin $s_p50 ms (x$r50)"
  check "$t: hello p99 stays close (<= ${ratio_max}x or +${abs_max_ms} ms)" "$([ "$ok99" = 1 ]; echo $?)" "baseline $b_p99 ms, under spin $s_p99 ms (x$r99)"
  echo "    hello throughput: baseline $b_rps req/s, under spin $s_rps req/s (x$rrps)"
  summary+="${summary:+; }$spinners spinning: $s504/$spins spin 504 in ${min_ms}..${max_ms} ms, hello p50 $b_p50->$s_p50 ms (x$r50) p99 $b_p99->$s_p99 ms (x$r99) req/s x$rrps"
done
floor=""
for loops in $floor_loops; do
  hogs=()
  for _ in $(seq "$loops"); do chrt -i 0 sh -c 'while :; do :; done' & hogs+=($!); done
  echo "  for reference: $loops idle-class shell loop(s) (chrt -i 0), no spin requests: same wrk"
  measure "floor$loops"
  kill "${hogs[@]}" 2>/dev/null; wait "${hogs[@]}" 2>/dev/null || true
  read -r f_rps f_p50 f_p99 _ < <(wrk_summary "$TMP/wrk-floor$loops.txt")
  floor+="${floor:+, }$loops loop(s) p99 $f_p99 ms"
done
[ -n "$floor" ] && summary+="; kernel reference (idle-class shell loops, no spin): $floor"
kill -0 "$gw_pid" 2>/dev/null
check "gateway still running" $? ""

finish R3 "deadline $deadline_ms ms; $summary"
