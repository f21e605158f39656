#!/usr/bin/env bash
# R8: the admin API under attack from a web page (docs/admin.md, "Access and
# the threat model"). A gateway with `admin` on loopback and no token, as
# users run it, in file mode with the operator's commented configuration.
# Sent with curl as a browser would after DNS rebinding (a foreign Host) or
# from another origin (a foreign Origin, a "simple" text/plain POST):
# every one must be refused with 403 naming its check, change nothing (the
# generation stays, the route is not served) and leave the operator's file
# byte for byte as written. Then, with `admin_writes: true`, a deliberate
# change must apply, go to wasmgate.admin.yaml (the file still untouched)
# and be audited (log line and /status last_change with peer and token).
# Usage: reliability/r8_admin.sh
source "$(dirname "$0")/lib.sh"

gw="$(free_port)"
admin="$(free_port)"
write_config() { # admin_writes: true|false
  cat >"$TMP/wasmgate.yaml" <<EOF2
# The operator's gateway: hand-written, kept in git.
listen: 127.0.0.1:$gw
admin: 127.0.0.1:$admin   # loopback, no token
admin_writes: $1
routes:
  - name: home          # the only route
    path: {exact: /}
    respond: {status: 200, body: home}
EOF2
}
write_config false
start gateway "$WASMGATE" run -c "$TMP/wasmgate.yaml" --log-level info
gw_pid=$LAST_PID
wait_port "$admin" "$gw_pid"
file_hash() { sha256sum "$TMP/wasmgate.yaml" | cut -c1-16; }
before_hash="$(file_hash)"
base="http://127.0.0.1:$admin"
route='{"path": {"exact": "/evil"}, "respond": {"body": "pwned"}}'

# expect NAME STATUS CHECK CURL-ARGS...: one request, its status and check.
expect() {
  local name="$1" want_status="$2" want_check="$3"
  shift 3
  local code check
  code="$(curl -s -m 10 -o "$TMP/reply.json" -w '%{http_code}' "$@")"
  check="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("check",""))' "$TMP/reply.json" 2>/dev/null || true)"
  check "$name -> $want_status${want_check:+ ($want_check)}" "$([ "$code" = "$want_status" ] && [ "$check" = "$want_check" ]; echo $?)" "got $code ${check:-}$([ "$code" = "$want_status" ] || tr -d "\n" <"$TMP/reply.json" | head -c 200)"
}

echo "  DNS rebinding (Host: evil.example:$admin), no token:"
rebound=(-H "Host: evil.example:$admin")
expect "GET /config" 403 host "${rebound[@]}" "$base/config"
expect "GET /metrics" 403 host "${rebound[@]}" "$base/metrics"
expect "PUT /routes/r2" 403 host "${rebound[@]}" -X PUT -H 'Content-Type: application/json' -d "$route" "$base/routes/r2"
expect "DELETE /routes/home" 403 host "${rebound[@]}" -X DELETE "$base/routes/home"
expect "POST /reload" 403 host "${rebound[@]}" -X POST -H 'Content-Type: application/json' "$base/reload"
expect "GET /healthz (probes answer any name)" 200 "" "${rebound[@]}" "$base/healthz"

echo "  cross-origin (Origin: http://evil.example):"
foreign=(-H "Origin: http://evil.example")
expect "simple POST /reload (text/plain)" 403 origin "${foreign[@]}" -X POST -H 'Content-Type: text/plain' -d x "$base/reload"
expect "POST /profile" 403 origin "${foreign[@]}" -X POST "$base/profile?seconds=1"
expect "PUT /routes/r2" 403 origin "${foreign[@]}" -X PUT -H 'Content-Type: application/json' -d "$route" "$base/routes/r2"
expect "GET /config" 403 origin "${foreign[@]}" "$base/config"
expect "Origin: null" 403 origin -H "Origin: null" "$base/config"
expect "preflight OPTIONS" 403 origin "${foreign[@]}" -X OPTIONS -H 'Access-Control-Request-Method: PUT' "$base/routes/r2"

echo "  no Origin, no token, a simple POST (a browser that omits Origin):"
expect "POST /reload text/plain" 403 intent -X POST -H 'Content-Type: text/plain' -d x "$base/reload"
expect "POST /reload form" 403 intent -X POST -d 'a=b' "$base/reload"
expect "POST /reload empty" 403 intent -X POST "$base/reload"

echo "  file mode without admin_writes:"
expect "PUT /routes/r2 (same origin, deliberate)" 403 admin_writes -X PUT -H 'Content-Type: application/json' -d "$route" "$base/routes/r2"

gen="$(curl -sf -m 5 "$base/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["reload"]["generation"])')"
check "nothing was applied (generation 1)" "$([ "$gen" = 1 ]; echo $?)" "generation $gen"
evil="$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$gw/evil")"
check "the route was not served" "$([ "$evil" = 404 ]; echo $?)" "GET /evil -> $evil"
check "the operator's file is untouched" "$([ "$(file_hash)" = "$before_hash" ]; echo $?)"

echo "  admin_writes: true (the operator opts in; the watcher reloads):"
write_config true
before_hash="$(file_hash)"
for _ in $(seq 100); do
  curl -sf -m 5 "$base/status" | grep -q '"admin_writes": true' && break
  sleep 0.1
done
t0=$(date +%s%N)
expect "deliberate PUT /routes/r2" 201 "" -X PUT -H 'Content-Type: application/json' -d "$route" "$base/routes/r2"
put_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
served="$(curl -s -m 5 "http://127.0.0.1:$gw/evil")"
check "the new route serves" "$([ "$served" = pwned ]; echo $?)" "$served"
check "the operator's file is untouched" "$([ "$(file_hash)" = "$before_hash" ]; echo $?)"
check "the change is kept in wasmgate.admin.yaml" "$(grep -q 'name: r2' "$TMP/wasmgate.admin.yaml"; echo $?)"
curl -sf -m 5 "$base/status" >"$TMP/status.json"
last="$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["last_change"]; print(c["action"], c["peer"].split(":")[0], c["token"], c["before"], bool(c["after"]), c["outcome"].split()[0])' "$TMP/status.json")"
check "/status last_change" "$([ "$last" = "PUT route r2 127.0.0.1 False None True applied" ]; echo $?)" "$last"
check "audit log line" "$(grep -q 'admin change.*PUT route r2' "$TMP/gateway.log"; echo $?)" "$(grep 'admin change' "$TMP/gateway.log" | tail -1 | cut -c1-200)"

finish R8 "foreign Host, foreign Origin, simple POSTs and file-mode writes refused with 403 naming the check; nothing applied, the operator's file unchanged; an opted-in write applied in ${put_ms} ms, kept in the admin file and audited"
