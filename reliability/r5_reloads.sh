#!/usr/bin/env bash
# R5: RELOADS (default 100) reloads of a gateway's configuration under steady
# load, every third one broken, in turn: a plugin file overwritten with bytes
# that are not wasm, a YAML syntax error, a filter refusing its configuration
# (http_config.wasm with an empty conf, its on_configure returns false).
# The gateway has two filtered routes: http_config.wasm (Rust SDK; response
# header custom-header: <conf>, the conf changes with every good reload) and
# go_add_header.wasm (Go SDK), both answering locally; python keep-alive
# clients (4 on the Rust route, 2 on the Go route) send requests throughout.
# Reloads go through POST /reload on the admin listener (--no-watch).
# Pass: 0 failed requests; every good reload answers 200 and its conf is
# served right after; every broken one answers 422 with its reason, /status
# shows it as last_error, and wasmgate_config_reload_failures_total counts it;
# no response ever carries a broken conf; RSS after all reloads is back to its
# level: at most RSS_MAX_GROWTH (default 1.25) x the RSS before. PSS (shared
# pages counted once, see lib.sh) is reported beside it.
# Usage: [RELOADS=100] reliability/r5_reloads.sh
source "$(dirname "$0")/lib.sh"
reloads="${RELOADS:-100}"
growth_max="${RSS_MAX_GROWTH:-1.25}"

gw="$(free_port)"
admin="$(free_port)"
mkdir -p "$TMP/plugins"
cp "$WASM/http_config.wasm" "$TMP/plugins/cfg.wasm"
cp "$WASM/go_add_header.wasm" "$TMP/plugins/go.wasm"
config() { # conf of the Rust filter
  cat <<EOF
listen: 127.0.0.1:$gw
admin: 127.0.0.1:$admin
plugins:
  - {name: cfg, wasm: plugins/cfg.wasm}
  - {name: go, wasm: plugins/go.wasm}
routes:
  - {name: rust, path: {prefix: /rust}, plugins: [{plugin: cfg, conf: "$1"}], respond: {status: 200, body: "ok\n"}}
  - {name: go, path: {prefix: /go}, plugins: [{plugin: go, conf: g}], respond: {status: 200, body: "ok\n"}}
EOF
}
# Written beside and renamed into place, as a deploy would.
write_config() { cat >"$TMP/gateway.yaml.new" && mv "$TMP/gateway.yaml.new" "$TMP/gateway.yaml"; }
config v0 | write_config
start gateway "$WASMGATE" run -c "$TMP/gateway.yaml" --no-watch --log-level warn
pid=$LAST_PID
wait_port "$gw" "$pid"
wait_port "$admin" "$pid"

load() { # name threads url [header]
  start "load-$1" timeout 600 python3 "$REL/relib.py" load --threads "$2" --url "$3" ${4:+--header "$4"} \
    --stop "$TMP/stop" --out "$TMP/load-$1.json" --timeout 10
}
load rust 4 "http://127.0.0.1:$gw/rust" custom-header
load_rust=$LAST_PID
load go 2 "http://127.0.0.1:$gw/go"
load_go=$LAST_PID
sleep 3
rss_before="$(rss_kib "$pid")"
pss_before="$(pss_kib "$pid")"
inst_before="$(metric "$admin" wasmgate_pool_instances)"
warm_before="$(metric "$admin" wasmgate_pool_unused_warm_memories)"
warm_bytes_before="$(metric "$admin" wasmgate_pool_unused_memory_bytes_resident)"
echo "  before: RSS $((rss_before / 1024)) MiB, pool instances ${inst_before:-?}, warm memory slots ${warm_before:-?} (${warm_bytes_before:-?} bytes resident)"

good=0 broken=0 good_ok=0 broken_ok=0 samples=""
deviations=()
for i in $(seq "$reloads"); do
  if ((i % 3 == 0)); then
    case $(((i / 3) % 3)) in
      0) kind="bad wasm" reason="not a WebAssembly module"
         echo "this is not wasm" >"$TMP/plugins/cfg.wasm"; config "v$i" | write_config ;;
      1) kind="bad YAML" reason="while parsing"
         printf 'listen: 127.0.0.1:%s\nroutes: [ {name: x,\n' "$gw" | write_config ;;
      2) kind="on_configure refusing" reason="proxy_on_configure returned false"
         config "" | write_config ;;
    esac
    broken=$((broken + 1))
    code="$(curl -s -m 30 -o "$TMP/reload.json" -w '%{http_code}' -X POST -H "X-Wasmgate-Admin: 1" "http://127.0.0.1:$admin/reload")"
    status="$(curl -s -m 5 "http://127.0.0.1:$admin/status")"
    if [ "$code" = 422 ] && grep -qF "$reason" "$TMP/reload.json" && echo "$status" | grep -qF "$reason"; then
      broken_ok=$((broken_ok + 1))
    else
      deviations+=("reload $i ($kind): HTTP $code $(head -c 300 "$TMP/reload.json"); status: ${status:0:300}")
    fi
    # Repair for the next one: the plugin file back, the last good config.
    cp "$WASM/http_config.wasm" "$TMP/plugins/cfg.wasm"
  else
    good=$((good + 1))
    config "v$i" | write_config
    code="$(curl -s -m 30 -o "$TMP/reload.json" -w '%{http_code}' -X POST -H "X-Wasmgate-Admin: 1" "http://127.0.0.1:$admin/reload")"
    served="$(curl -s -m 5 -D - -o /dev/null "http://127.0.0.1:$gw/rust" | tr -d '\r' | awk -F': ' 'tolower($1) == "custom-header" {print $2}')"
    if [ "$code" = 200 ] && [ "$served" = "v$i" ]; then
      good_ok=$((good_ok + 1))
    else
      deviations+=("reload $i (good): HTTP $code $(head -c 300 "$TMP/reload.json"); served conf '$served', expected v$i")
    fi
  fi
  if ((i % 25 == 0)); then
    samples+="${samples:+, }$i: $(($(rss_kib "$pid") / 1024))"
  fi
  sleep 0.05
done
# The last good configuration back in place, then steady traffic for a while.
config "v$reloads-final" | write_config
curl -s -m 30 -o /dev/null -X POST -H "X-Wasmgate-Admin: 1" "http://127.0.0.1:$admin/reload" || true
sleep 3
touch "$TMP/stop"
for p in "$load_rust" "$load_go"; do
  for _ in $(seq 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
done
sleep 1
rss_after="$(rss_kib "$pid")"
pss_after="$(pss_kib "$pid")"
inst_after="$(metric "$admin" wasmgate_pool_instances)"
warm_after="$(metric "$admin" wasmgate_pool_unused_warm_memories)"
warm_bytes_after="$(metric "$admin" wasmgate_pool_unused_memory_bytes_resident)"
failures="$(metric "$admin" wasmgate_config_reload_failures_total)"
generation="$(metric "$admin" wasmgate_config_generation)"

for d in "${deviations[@]}"; do echo "    $d"; done
read -r requests failed values bad_values < <(python3 - "$TMP/load-rust.json" "$TMP/load-go.json" <<'PY'
import json, sys
r, g = (json.load(open(p)) for p in sys.argv[1:3])
for d in (r, g):
    for reason, n in list(d["failures"].items())[:5]:
        print(f"    failure x{n}: {reason}", file=sys.stderr)
vals = r["header_values"]
bad = {v: n for v, n in vals.items() if not v.startswith("v") or v == "v"}
if bad:
    print(f"    responses with a conf no good reload set: {bad}", file=sys.stderr)
print(r["requests"] + g["requests"], r["failed"] + g["failed"], len(vals), sum(bad.values()))
PY
)
echo "  $requests requests during $reloads reloads (+3 s after), RSS MiB by reloads done: 0: $((rss_before / 1024)), $samples, end: $((rss_after / 1024))"
pss_ratio="$(python3 -c 'import sys; print("%.2f" % (int(sys.argv[2]) / int(sys.argv[1])))' "$pss_before" "$pss_after")"
echo "  PSS (shared pages once): before $((pss_before / 1024)) MiB, after $((pss_after / 1024)) MiB (x$pss_ratio)"
check "0 failed requests" "$([ "$failed" = 0 ] && [ "$requests" -gt 0 ]; echo $?)" "$failed of $requests"
check "every good reload: 200 and its conf served next" "$([ "$good_ok" = "$good" ]; echo $?)" "$good_ok of $good"
check "every broken reload: 422 with its reason, /status last_error shows it" "$([ "$broken_ok" = "$broken" ]; echo $?)" "$broken_ok of $broken"
check "wasmgate_config_reload_failures_total counts them" "$([ "${failures:-x}" = "$broken" ]; echo $?)" "${failures:-absent} (expected $broken)"
check "generation = 1 + good reloads + final" "$([ "${generation:-x}" = $((good + 2)) ]; echo $?)" "${generation:-absent}"
check "no response carried a rejected conf" "$([ "$bad_values" = 0 ]; echo $?)" "$values distinct confs served"
kill -0 "$pid" 2>/dev/null
check "gateway still running" $? ""
ratio="$(python3 -c 'import sys; print("%.2f" % (int(sys.argv[2]) / int(sys.argv[1])))' "$rss_before" "$rss_after")"
ok="$(python3 -c 'import sys; print(int(int(sys.argv[2]) <= int(sys.argv[1]) * float(sys.argv[3])))' "$rss_before" "$rss_after" "$growth_max")"
check "RSS back to its level (after <= ${growth_max} x before)" "$([ "$ok" = 1 ]; echo $?)" "before $((rss_before / 1024)) MiB, after $((rss_after / 1024)) MiB (x$ratio, $(((rss_after - rss_before) / good)) KiB per good reload); pool instances ${inst_before:-?} -> ${inst_after:-?}, warm memory slots ${warm_before:-?} -> ${warm_after:-?} holding $(( ${warm_bytes_before:-0} / 1048576 )) -> $(( ${warm_bytes_after:-0} / 1048576 )) MiB"

finish R5 "$reloads reloads ($good good, $broken broken) under load: $failed failed of $requests requests; $broken_ok/$broken rejected with reason, failures_total ${failures:-?}; RSS $((rss_before / 1024)) -> $((rss_after / 1024)) MiB (x$ratio), PSS x$pss_ratio"
