#!/usr/bin/env bash
# R4: a plugin that allocates without bound. faults.wasm `grow` (1 MiB blocks
# forever) on `wasmgate serve --memory-limit CAP_MIB` (default 64), REQUESTS
# times (default 200) from CONCURRENCY clients (default 4); the server's VmRSS
# is sampled every 10 requests. Then a gateway function route with
# `memory_limit_mb` gets 20 more.
# Pass: every request fails with 500 `out_of_memory` naming the cap; RSS stays
# bounded: max <= start + CONCURRENCY x CAP + 64 MiB, and the second half of the
# run ends no more than 16 MiB above the first half's peak (no growth per
# request); the server still answers a normal call afterwards.
# Usage: [REQUESTS=200] [CAP_MIB=64] [CONCURRENCY=4] reliability/r4_memory.sh
source "$(dirname "$0")/lib.sh"
n="${REQUESTS:-200}"
cap="${CAP_MIB:-64}"
conc="${CONCURRENCY:-4}"

cat >"$TMP/r4.py" <<'PY'
import json, sys, threading, time
from relib import request
url, count, conc, pid, cap, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), sys.argv[6]
def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
start_rss = rss()
samples, bad, ok, times = [(0, start_rss)], [], 0, []
lock = threading.Lock()
done = 0
def worker(k):
    global done, ok
    for i in range(k, count, conc):
        status, _, body, took, err = request(url, "POST", b"", timeout=30)
        try:
            e = json.loads(body)["error"]
        except Exception:
            e = {}
        good = (status == 500 and e.get("kind") == "out_of_memory"
                and str(cap * 1024 * 1024) in e.get("message", ""))
        with lock:
            times.append(took)
            if good:
                ok += 1
            elif len(bad) < 10:
                bad.append(f"request {i}: {status} {err or body[:300].decode('utf-8', 'replace')}")
            done += 1
            if done % 10 == 0:
                samples.append((done, rss()))
            if ok == 1 and good:
                first = e["message"]
                open(out + ".msg", "w").write(first)
ts = [threading.Thread(target=worker, args=(k,)) for k in range(conc)]
[t.start() for t in ts]; [t.join() for t in ts]
times.sort()
json.dump({"ok": ok, "bad": bad, "samples": samples, "p50_ms": round(times[len(times) // 2] * 1000, 1),
           "max_ms": round(times[-1] * 1000, 1)}, open(out, "w"))
PY

# --- serve
port="$(free_port)"
start serve "$WASMGATE" serve "$WASM/faults.wasm" grow --port "$port" --memory-limit "$cap" --pool-size "$conc" --log-level warn
pid=$LAST_PID
wait_port "$port" "$pid"
echo "  serve --memory-limit $cap --pool-size $conc: $n x POST /grow, $conc clients"
timeout 300 python3 "$TMP/r4.py" "http://127.0.0.1:$port/grow" "$n" "$conc" "$pid" "$cap" "$TMP/serve.json"
echo "    error message: $(cat "$TMP/serve.json.msg" 2>/dev/null)"
read -r ok bad start_kib max_kib end_kib half_max_kib p50 maxms samples < <(python3 - "$TMP/serve.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for b in d["bad"]:
    print("    " + b, file=sys.stderr)
s = d["samples"]
rss = [r for _, r in s]
half = [r for k, r in s if 0 < k <= max(k for k, _ in s) // 2] or rss
print(d["ok"], len(d["bad"]), rss[0], max(rss), rss[-1], max(half), d["p50_ms"], d["max_ms"],
      ",".join(f"{k}:{r // 1024}" for k, r in s))
PY
)
sleep 2
settled_kib="$(rss_kib "$pid")"
echo "    VmRSS MiB by requests done: $samples; 2 s later: $((settled_kib / 1024))"
check "every grow request: 500 out_of_memory naming the ${cap} MiB cap" "$([ "$ok" = "$n" ]; echo $?)" "$ok of $n (latency p50 $p50 ms, max $maxms ms)"
bound=$((start_kib + conc * cap * 1024 + 65536))
check "RSS bounded (max <= start + $conc x $cap MiB + 64 MiB = $((bound / 1024)) MiB)" "$([ "$max_kib" -le "$bound" ]; echo $?)" "start $((start_kib / 1024)) MiB, max $((max_kib / 1024)) MiB, end $((end_kib / 1024)) MiB"
check "RSS does not grow per request (end <= first-half peak + 16 MiB)" "$([ "$end_kib" -le $((half_max_kib + 16384)) ]; echo $?)" "first-half peak $((half_max_kib / 1024)) MiB, end $((end_kib / 1024)) MiB"
after="$(curl -s -m 10 -X POST "http://127.0.0.1:$port/trap_sometimes" -d 7)"
check "serve still answers a normal call" "$([ "$after" = "ok 7" ]; echo $?)" "$after"
grown="$(grep -cE 'failed \(out_of_memory(, request [0-9]+)?\): memory cap exceeded' "$TMP/serve.log" || true)"
check "log: one out_of_memory report per request" "$([ "$grown" = "$n" ]; echo $?)" "$grown"
s_summary="serve: $ok/$n stopped at the $cap MiB cap (p50 $p50 ms); RSS start $((start_kib / 1024)) max $((max_kib / 1024)) end $((end_kib / 1024)) settled $((settled_kib / 1024)) MiB"
kill "$pid" 2>/dev/null || true

# --- gateway function route with memory_limit_mb
gw="$(free_port)"
admin="$(free_port)"
# error_details: the answers carry the cap the reports name (checked below).
cat >"$TMP/gateway.yaml" <<EOF
listen: 127.0.0.1:$gw
admin: 127.0.0.1:$admin
error_details: true
plugins:
  - {name: faults, wasm: $WASM/faults.wasm, memory_limit_mb: 32, pool_size: 4}
routes:
  - {name: faults, path: {prefix: /}, function: {plugin: faults}}
EOF
start gateway "$WASMGATE" run -c "$TMP/gateway.yaml" --no-watch --log-level error
gw_pid=$LAST_PID
wait_port "$gw" "$gw_pid"
timeout 120 python3 "$TMP/r4.py" "http://127.0.0.1:$gw/grow" 20 2 "$gw_pid" 32 "$TMP/gateway.json"
read -r g_ok g_start g_max < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); r=[x for _, x in d["samples"]]; print(d["ok"], r[0] // 1024, max(r) // 1024)' "$TMP/gateway.json")
check "gateway memory_limit_mb 32: every grow request 500 out_of_memory" "$([ "$g_ok" = 20 ]; echo $?)" "$g_ok of 20; RSS $g_start -> max $g_max MiB"
sleep 1
echo "    gateway after the grow requests: RSS $(($(rss_kib "$gw_pid") / 1024)) MiB; freed linear-memory slots the engine keeps warm: $(metric "$admin" wasmgate_pool_unused_warm_memories), resident $(($(metric "$admin" wasmgate_pool_unused_memory_bytes_resident) / 1048576)) MiB"
after="$(curl -s -m 10 -X POST "http://127.0.0.1:$gw/trap_sometimes" -d 3)"
check "gateway still answers a normal call" "$([ "$after" = "ok 3" ]; echo $?)" "$after"

finish R4 "$s_summary; gateway 32 MiB cap $g_ok/20"
