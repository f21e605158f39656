#!/usr/bin/env bash
# The reliability suite (issue 4, item 6, and R8 of issue 20): runs R1-R8 (R6 when
# reliability/r6_fuzz.sh exists) one after the other against the release
# binary, each bounded by a timeout, and writes each one's raw output to
# reliability/results/<name>.txt and the one-line summaries to
# reliability/results/summary.txt. Exits non-zero when any item fails.
# Usage: [ONLY="r2 r5"] reliability/run.sh   (make reliability builds first)
set -uo pipefail
rel="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$rel/.." && pwd)"
cd "$root"
results="$rel/results"
mkdir -p "$results"

[ -x target/release/wasmgate ] && [ -f target/wasm/faults.wasm ] || {
  echo "build first: make plugins build" >&2
  exit 2
}
for tool in wrk nginx; do
  command -v "$tool" >/dev/null || { scripts/install-deps.sh --bench; break; }
done

# name, time limit (s)
items=(
  "r1_connections $(( ${DURATION:-30} * 2 + 90 ))"
  "r2_traps 180"
  "r3_spin 180"
  "r3b_long_calls 180"
  "r4_memory 180"
  "r5_reloads 240"
)
[ -f "$rel/r6_fuzz.sh" ] && items+=("r6_fuzz ${R6_TIMEOUT:-600}")
items+=("r7_bad_input 120" "r8_admin 60")

{
  echo "wasmgate reliability suite, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- crates 2>/dev/null || echo ' (crates/ modified in the work tree)'), binary built $(date -u -r target/release/wasmgate +%Y-%m-%dT%H:%M:%SZ)"
  echo "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$results/summary.txt"

failed=()
start_all=$(date +%s)
for item in "${items[@]}"; do
  read -r name limit <<<"$item"
  [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" ${name%%_*} "* ]] && continue
  echo "=== $name (at most $limit s)"
  t0=$(date +%s)
  timeout -k 10 "$limit" bash "$rel/$name.sh" 2>&1 | tee "$results/$name.txt"
  rc=${PIPESTATUS[0]}
  took=$(( $(date +%s) - t0 ))
  line="$(grep -E '^R[0-9]+ (PASS|FAIL)' "$results/$name.txt" | tail -1)"
  case "$rc" in
    0) ;;
    124 | 137) line="${name%%_*} FAIL: timed out after $limit s"; failed+=("$name") ;;
    *) failed+=("$name"); [ -n "$line" ] || line="${name%%_*} FAIL: exit $rc (see results/$name.txt)" ;;
  esac
  [ -n "$line" ] || line="${name%%_*}: exit $rc"
  echo "$line [${took} s]" >>"$results/summary.txt"
  echo
done
echo "total $(( $(date +%s) - start_all )) s" >>"$results/summary.txt"
echo "=== summary (reliability/results/summary.txt)"
cat "$results/summary.txt"
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}"
  exit 1
fi
