# Shared by the reliability scripts (sourced, not run): paths, free ports,
# starting and always stopping processes, waiting for ports, RSS, checks.
# Every script sources this first; its EXIT trap kills what the script started.
set -euo pipefail

REL="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$REL/.." && pwd)"
WASMGATE="$ROOT/target/release/wasmgate"
WASM="$ROOT/target/wasm"
TMP="$(mktemp -d /tmp/wasmgate-reliability.XXXXXX)"
PIDS=()
FAILED=0
CHECKS=0
export PYTHONPATH="$REL${PYTHONPATH:+:$PYTHONPATH}"

[ -x "$WASMGATE" ] || { echo "missing $WASMGATE: run make plugins build" >&2; exit 2; }
[ -f "$WASM/faults.wasm" ] || { echo "missing $WASM/faults.wasm: run make plugins" >&2; exit 2; }

cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  # Whatever ignored SIGTERM for 3 s gets SIGKILL.
  for _ in $(seq 30); do
    local alive=0
    for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  [ -n "${KEEP_TMP:-}" ] || rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP

# A port that is free now, from 11000-17999: below the ephemeral range (so no
# outbound connection, wrk's 1000 among them, can take it before the server
# binds) and apart from the test suite's (20000+) and bench's (184xx) ports.
declare -A GIVEN_PORTS=()
free_port() {
  local port
  while :; do
    port=$((11000 + RANDOM % 7000))
    [ -z "${GIVEN_PORTS[$port]:-}" ] || continue
    if python3 -c 'import socket,sys; s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1])))' "$port" 2>/dev/null; then
      GIVEN_PORTS[$port]=1
      echo "$port"
      return
    fi
  done
}

# start NAME CMD...: runs CMD in the background, log in $TMP/NAME.log; sets LAST_PID.
start() {
  local name="$1"
  shift
  "$@" >"$TMP/$name.log" 2>&1 &
  LAST_PID=$!
  PIDS+=("$LAST_PID")
}

# wait_port PORT PID: until something accepts on PORT (30 s at most).
wait_port() {
  for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { echo "process $2 (port $1) exited" >&2; return 1; }
    sleep 0.1
  done
  echo "nothing listens on port $1" >&2
  return 1
}

# upstream PORT [DELAY_S]: a small python HTTP/1.1 upstream (relib.py); sets LAST_PID.
upstream() {
  start "upstream-$1" python3 "$REL/relib.py" upstream --port "$1" --delay "${2:-0}"
  wait_port "$1" "$LAST_PID"
}

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
hwm_kib() { awk '/^VmHWM/ {print $2}' "/proc/$1/status"; }
# Proportional set size: RSS with each shared page counted once. A plugin's
# data image is one memfd mapped into every slot that ran the plugin; RSS
# counts its pages once per slot, PSS (like a cgroup's memory) once.
pss_kib() { awk '/^Pss:/ {print $2}' "/proc/$1/smaps_rollup"; }

# metric ADMIN_PORT NAME: one sample of an unlabelled metric (empty if absent).
metric() { curl -sf -m 5 "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }

# check NAME CONDITION-EXIT-STATUS DETAIL: records one pass/fail line.
check() {
  local name="$1" ok="$2" detail="${3:-}"
  CHECKS=$((CHECKS + 1))
  if [ "$ok" = 0 ]; then
    echo "  PASS  $name${detail:+: $detail}"
  else
    echo "  FAIL  $name${detail:+: $detail}"
    FAILED=$((FAILED + 1))
  fi
}

# finish ITEM SUMMARY: the one-line summary, and the exit status.
finish() {
  if [ "$FAILED" = 0 ]; then
    echo "$1 PASS ($CHECKS checks): $2"
    exit 0
  fi
  echo "$1 FAIL ($FAILED of $CHECKS checks failed): $2"
  exit 1
}

# wrk_summary FILE: "rps p50_ms p99_ms requests non2xx socket_errors" from wrk --latency output.
wrk_summary() {
  awk '
    function ms(v) { return v ~ /us$/ ? v / 1000 : v ~ /ms$/ ? v + 0 : v * 1000 }
    $1 == "50%" { p50 = ms($2) }
    $1 == "99%" { p99 = ms($2) }
    /requests in/ { reqs = $1 }
    /^Requests\/sec:/ { rps = $2 }
    /Non-2xx or 3xx responses:/ { non2xx += $NF }
    /Socket errors:/ { gsub(",", ""); sock += $4 + $6 + $8 + $10 }
    END { printf "%.0f %.2f %.2f %d %d %d\n", rps, p50, p99, reqs, non2xx, sock }' "$1"
}
