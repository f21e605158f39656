#!/usr/bin/env bash
# R6: every host function of both ABIs driven with hostile pointers, lengths
# and sequences, for a bounded time. Runs the two long-running property tests,
#   cargo test --release -p wasmgate-proxy-wasm --test host fuzz_host:: -- --nocapture
#   cargo test --release -p wasmgate-extism     --test host fuzz_host:: -- --nocapture
# each for half of R6_SECONDS (default 300), with one seed (default: from the
# clock, printed so a failure can be replayed with WASMGATE_FUZZ_SEED=...).
# A test fails on any panic, abort, hang (30 s per stream or call), error not
# attributable to the host function that refused the call, instance kept
# after a failure, or probe request that no longer works; so a pass means 0
# crashes. Prints the tests' tables, then
#   R6: <N> executions of <M> host functions, 0 crashes
# Usage: [R6_SECONDS=300] [WASMGATE_FUZZ_SEED=0x...] reliability/r6_fuzz.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
total="${R6_SECONDS:-300}"
half=$((total / 2))
seed="${WASMGATE_FUZZ_SEED:-$(printf '0x%x' "$(date +%s)")}"
out="$(mktemp -d /tmp/wasmgate-r6.XXXXXX)"
trap 'rm -rf "$out"' EXIT

fail() {
  echo "R6 FAIL: $1"
  exit 1
}

echo "  building the fuzz tests (not timed)"
for crate in wasmgate-proxy-wasm wasmgate-extism; do
  cargo test --release -p "$crate" --test host --no-run >"$out/build-$crate.log" 2>&1 ||
    { tail -30 "$out/build-$crate.log"; fail "$crate's fuzz test does not build"; }
done

executions=0
functions=0
for crate in wasmgate-proxy-wasm wasmgate-extism; do
  echo "  $crate: ${half} s, seed $seed"
  echo "    WASMGATE_FUZZ_SECS=$half WASMGATE_FUZZ_ITERS=1000000000 WASMGATE_FUZZ_SEED=$seed cargo test --release -p $crate --test host fuzz_host:: -- --nocapture"
  rc=0
  WASMGATE_FUZZ_SECS="$half" WASMGATE_FUZZ_ITERS=1000000000 WASMGATE_FUZZ_SEED="$seed" \
    timeout -k 10 $((half + 120)) \
    cargo test --release -p "$crate" --test host fuzz_host:: -- --nocapture >"$out/$crate.log" 2>&1 || rc=$?
  sed 's/^/    /' "$out/$crate.log" | grep -v '^    \s*\(Compiling\|Finished\|Running\|Blocking\)'
  case "$rc" in
    0) ;;
    124 | 137) fail "$crate's fuzz test hung (killed after $((half + 120)) s, seed $seed)" ;;
    *) fail "$crate's fuzz test failed (exit $rc, seed $seed): see above" ;;
  esac
  line="$(grep -E '^R6 (proxy-wasm|extism):' "$out/$crate.log" | tail -1)" ||
    fail "$crate printed no R6 line"
  n="$(sed -n 's/.* executions=\([0-9]*\) .*/\1/p' <<<"$line")"
  m="$(sed -n 's/.* functions=\([0-9]*\) .*/\1/p' <<<"$line")"
  [ -n "$n" ] && [ -n "$m" ] || fail "cannot read the R6 line: $line"
  executions=$((executions + n))
  functions=$((functions + m))
done

echo "R6: $executions executions of $functions host functions, 0 crashes"
echo "R6 PASS (2 checks): $executions executions of $functions host functions in ${total} s, 0 crashes (seed $seed)"
