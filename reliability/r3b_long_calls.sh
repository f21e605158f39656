#!/usr/bin/env bash
# R3b: legitimate long calls under load (issue 18). `wasmgate serve
# bench.wasm echo` answers a 6.25 MiB POST (a guest call of ~10 ms that moves
# to the slow lane); its time is measured alone (median of ROUNDS, default 7),
# then while `wrk -t1 -c32` saturates the server with small requests to /noop
# (median of ROUNDS again). Two cases: (a) the server on one CPU
# (`taskset -c 0`: one worker and one slow-lane thread share it; wrk on the
# other CPU), (b) the server on two CPUs (wrk beside it). Pass, per case:
# every big echo 200 with the right length, loaded median at most RATIO_MAX
# (default 4) times the alone median, and 0 errors for the small requests.
# Also printed: the small requests' throughput and p99 with and without the
# big echoes. LONG_CALL_NICE sets --long-call-nice (default: the binary's).
# BASELINE=/path/to/an/older/wasmgate measures that binary too, in the same
# run (not judged). Every measurement goes to reliability/results/r3b.json;
# reliability/r3b_plot.py draws docs/img/r3b.png from it.
# Usage: [ROUNDS=7] [RATIO_MAX=4] [LONG_CALL_NICE=N] [BASELINE=BIN] reliability/r3b_long_calls.sh
source "$(dirname "$0")/lib.sh"
rounds="${ROUNDS:-7}"
ratio_max="${RATIO_MAX:-4}"
command -v wrk >/dev/null || { echo "wrk is missing: scripts/install-deps.sh --bench" >&2; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "R3b needs 2 CPUs (one for the server, one for the load)" >&2; exit 2; }
head -c 6553600 /dev/urandom >"$TMP/big.bin"
nice_flag=()
[ -n "${LONG_CALL_NICE:-}" ] && nice_flag=(--long-call-nice "$LONG_CALL_NICE")

# big_echoes N LABEL: N sequential 6.25 MiB echoes; prints their times (s),
# checks each answer.
big_echoes() {
  local port="$1" label="$2" i out code size
  for i in $(seq "$rounds"); do
    out="$(curl -s -m 30 -o "$TMP/echo.out" -w '%{http_code} %{time_total}' --data-binary @"$TMP/big.bin" "http://127.0.0.1:$port/echo")"
    read -r code t <<<"$out"
    size="$(stat -c %s "$TMP/echo.out" 2>/dev/null || echo 0)"
    [ "$code" = 200 ] && [ "$size" = 6553600 ] || { echo "  $label echo $i: HTTP $code, $size bytes" >&2; echo "FAIL"; }
    echo "$t"
  done
}
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

results="$REL/results/r3b.json"
mkdir -p "$REL/results"
: >"$results"

case_run() { # NAME SERVER_CPUS WRK_CPUS [BINARY LABEL]: judged unless a BINARY is given
  local name="$1" server_cpus="$2" wrk_cpus="$3" bin="${4:-$WASMGATE}" label="${5:-this binary}" port
  port="$(free_port)"
  local flags=("${nice_flag[@]}")
  [ -n "${4:-}" ] && flags=()
  start "serve-$name" taskset -c "$server_cpus" "$bin" serve "$WASM/bench.wasm" echo --port "$port" "${flags[@]}" --log-level error
  local pid=$LAST_PID
  wait_port "$port" "$pid"
  big_echoes "$port" warm-up >/dev/null
  echo "  ($name) $label: server on CPU(s) $server_cpus, wrk -t1 -c32 on CPU(s) $wrk_cpus"
  big_echoes "$port" alone >"$TMP/alone-$name.txt"
  timeout 60 taskset -c "$wrk_cpus" wrk -t1 -c32 -d4s --latency "http://127.0.0.1:$port/noop" >"$TMP/wrk-quiet-$name.txt" 2>&1 || true
  local dur=$(( rounds * 2 + 6 ))
  timeout $((dur + 30)) taskset -c "$wrk_cpus" wrk -t1 -c32 -d"${dur}s" --latency "http://127.0.0.1:$port/noop" >"$TMP/wrk-$name.txt" 2>&1 &
  local wrk_pid=$!
  sleep 2
  big_echoes "$port" loaded >"$TMP/loaded-$name.txt"
  wait "$wrk_pid" || true
  local a l fails rps p99 qrps qp99 non2xx sock reqs
  fails="$(cat "$TMP/alone-$name.txt" "$TMP/loaded-$name.txt" | grep -c FAIL || true)"
  a="$(grep -v FAIL "$TMP/alone-$name.txt" | median)"
  l="$(grep -v FAIL "$TMP/loaded-$name.txt" | median)"
  read -r rps _ p99 reqs non2xx sock < <(wrk_summary "$TMP/wrk-$name.txt")
  read -r qrps _ qp99 _ _ _ < <(wrk_summary "$TMP/wrk-quiet-$name.txt")
  local ratio
  ratio="$(awk -v a="$a" -v l="$l" 'BEGIN {printf "%.1f", l / a}')"
  echo "    alone:  $(tr '\n' ' ' <"$TMP/alone-$name.txt")s"
  echo "    loaded: $(tr '\n' ' ' <"$TMP/loaded-$name.txt")s"
  echo "    small requests: $qrps req/s p99 $qp99 ms alone; $rps req/s p99 $p99 ms beside the big echoes ($reqs requests)"
  printf '{"binary":"%s","case":"%s","alone_s":%s,"loaded_s":%s,"alone_all":[%s],"loaded_all":[%s],"small_rps_quiet":%s,"small_rps_loaded":%s,"small_errors":%s}\n' \
    "$label" "$name" "$a" "$l" "$(grep -v FAIL "$TMP/alone-$name.txt" | paste -sd,)" "$(grep -v FAIL "$TMP/loaded-$name.txt" | paste -sd,)" \
    "$qrps" "$rps" "$((non2xx + sock))" >>"$results"
  kill "$pid" 2>/dev/null || true
  if [ -n "${4:-}" ]; then
    echo "    (not judged) x$ratio"
    return
  fi
  check "($name) every big echo 200 with 6.25 MiB back" "$([ "$fails" = 0 ]; echo $?)" "$fails failed"
  check "($name) loaded median <= ${ratio_max}x alone" "$(awk -v r="$ratio" -v m="$ratio_max" 'BEGIN {exit !(r <= m)}'; echo $?)" "alone ${a}s, loaded ${l}s: x$ratio"
  check "($name) small requests without errors" "$([ "$non2xx" = 0 ] && [ "$sock" = 0 ] && [ "$reqs" -gt 0 ]; echo $?)" "$reqs requests, $non2xx non-2xx, $sock socket errors"
  eval "summary_$name=\"x$ratio (${a}s -> ${l}s)\""
}

case_run a 0 1
case_run b 0,1 0,1
if [ -n "${BASELINE:-}" ]; then
  case_run a 0 1 "$BASELINE" "baseline $(basename "$BASELINE")"
  case_run b 0,1 0,1 "$BASELINE" "baseline $(basename "$BASELINE")"
fi
finish R3b "6.25 MiB echo under saturating small requests: (a) 1 CPU $summary_a, (b) 2 CPUs $summary_b; 0 small-request errors"
