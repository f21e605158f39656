#!/usr/bin/env bash
# R7: bad input and bad neighbours. A gateway (limits.max_body_bytes 1024,
# header_read_timeout_ms 1000, and body_read_timeout_ms 1000 when the build
# has that setting) in front of small python upstreams started here (a fast
# one, one that answers after 3 s, and a port nothing listens on), and
# `wasmgate serve hello.wasm --max-body-bytes 1024`. Every client request has
# a timeout (at most 12 s), so nothing here can hang.
# Expected: oversized headers 431; oversized bodies a filter buffers or a
# function receives 413; malformed HTTP 400 (request line, header, version,
# Content-Length, chunked framing); a client sending its headers slowly gets
# 408 once the header read timeout passes, one sending nothing is disconnected;
# a client that stalls in its body neither holds the connection forever nor
# blocks other clients; a dead upstream 502; an upstream slower than the
# route's read timeout 504; with one dead and one healthy node and retries: 1
# every request 200; and client faults (malformed or stalled request bodies)
# never eject a healthy node through the passive health check.
# Lines marked (informational) report behaviour without judging it.
# Usage: reliability/r7_bad_input.sh
source "$(dirname "$0")/lib.sh"

up="$(free_port)"
slow="$(free_port)"
dead="$(free_port)" # never bound: connections are refused
gw="$(free_port)"
admin="$(free_port)"
sv="$(free_port)"
upstream "$up"
upstream "$slow" 3
# A request-body read timeout, where this build has one (limits.body_read_timeout_ms).
body_limit=""
if "$WASMGATE" schema 2>/dev/null | grep -q '"body_read_timeout_ms"'; then
  body_limit=", body_read_timeout_ms: 1000"
  echo "  limits.body_read_timeout_ms: 1000"
else
  echo "  this build has no request-body read timeout setting (limits.body_read_timeout_ms)"
fi
cat >"$TMP/gateway.yaml" <<EOF
listen: 127.0.0.1:$gw
admin: 127.0.0.1:$admin
limits: {max_body_bytes: 1024, header_read_timeout_ms: 1000$body_limit}
plugins:
  - {name: body, wasm: $WASM/http_body.wasm, pool_size: 2, queue_timeout_ms: 500}
  - {name: hello, wasm: $WASM/hello.wasm}
upstreams:
  - {name: ok, nodes: [{address: 127.0.0.1:$up}]}
  - {name: watched, nodes: [{address: 127.0.0.1:$up}], health_check: {passive: {max_failures: 3, ejection_ms: 30000}}}
  - {name: watched2, nodes: [{address: 127.0.0.1:$up}], read_timeout_ms: 1000, health_check: {passive: {max_failures: 3, ejection_ms: 30000}}}
  - {name: dead, nodes: [{address: 127.0.0.1:$dead}]}
  - {name: slow, nodes: [{address: 127.0.0.1:$slow}], read_timeout_ms: 500}
  - {name: mixed, nodes: [{address: 127.0.0.1:$dead}, {address: 127.0.0.1:$up}], retries: 1}
routes:
  - {name: ok, path: {prefix: /ok}, upstream: ok}
  - {name: watched, path: {prefix: /watched}, upstream: watched}
  - {name: watched2, path: {prefix: /stalled}, upstream: watched2}
  - {name: buffered, path: {prefix: /buffered}, plugins: [{plugin: body}], upstream: ok}
  - {name: hello, path: {exact: /hello}, function: {plugin: hello}}
  - {name: dead, path: {prefix: /dead}, upstream: dead}
  - {name: slow, path: {prefix: /slow}, upstream: slow}
  - {name: mixed, path: {prefix: /mixed}, upstream: mixed}
EOF
start gateway "$WASMGATE" run -c "$TMP/gateway.yaml" --no-watch --log-level warn
gw_pid=$LAST_PID
start serve "$WASMGATE" serve "$WASM/hello.wasm" hello --port "$sv" --max-body-bytes 1024 --log-level warn
sv_pid=$LAST_PID
wait_port "$gw" "$gw_pid"
wait_port "$sv" "$sv_pid"

rc=0
timeout 120 python3 - "$gw" "$admin" "$sv" >"$TMP/checks.txt" <<'PY' || rc=$?
import json, socket, sys, threading, time
from relib import request
GW, ADMIN, SV = (int(a) for a in sys.argv[1:4])
out_lock = threading.Lock()

def emit(ok, name, detail):
    with out_lock:
        print(f"{'PASS' if ok else 'FAIL'}\t{name}\t{detail}", flush=True)

def raw(port, data, timeout=5.0, trickle=None):
    """Sends bytes (then the `trickle` chunks, 0.2 s apart, while the server
    stays silent) and reads until the server closes or `timeout` passes.
    Returns (status or None, first bytes, seconds, "answered"|"closed"|"reset"|"timeout")."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    start = time.time()
    got, ended = b"", None
    try:
        if data:
            s.sendall(data)
        for chunk in trickle or []:
            s.setblocking(False)
            try:
                c = s.recv(65536)
                if not c:
                    ended = "closed"
                    break
                got += c
                break
            except BlockingIOError:
                pass
            s.setblocking(True)
            time.sleep(0.2)
            s.sendall(chunk)
        s.setblocking(True)
        while ended is None:
            left = timeout - (time.time() - start)
            if left <= 0:
                raise socket.timeout()
            # Once a response head is in, only wait briefly for the rest.
            s.settimeout(min(left, 0.5) if b"\r\n\r\n" in got else left)
            c = s.recv(65536)
            if not c:
                ended = "closed"
            got += c
    except socket.timeout:
        ended = "answered" if got else "timeout"
    except (ConnectionResetError, BrokenPipeError):
        ended = "reset"
    finally:
        s.close()
    took = round(time.time() - start, 2)
    status = int(got[9:12]) if got.startswith(b"HTTP/1.1 ") else None
    return status, got[:300], took, ended

def expect_status(name, port, data, want, **kw):
    status, got, took, ended = raw(port, data, **kw)
    first = got.split(b"\r\n")[0].decode("latin-1")
    emit(status == want, name, f"got {status} ({ended} after {took} s) {first}")

def http(name, path, want, port=GW, method="GET", body=None, kind=None, max_s=None):
    status, hdrs, data, took, err = request(f"http://127.0.0.1:{port}{path}", method, body, timeout=10)
    try:
        got_kind = json.loads(data)["error"]["kind"]
    except Exception:
        got_kind = None
    ok = status == want and (kind is None or got_kind == kind) and (max_s is None or took <= max_s)
    emit(ok, name, f"got {status} {got_kind or ''} in {took * 1000:.0f} ms" + (f" {err}" if err else ""))
    return status

head = lambda path, extra=b"": b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n" + extra + b"\r\n"

# --- oversized headers (431): one 600 KiB header; 200 headers (hyper's limit is 100).
for port, who in ((GW, "gateway"), (SV, "serve")):
    expect_status(f"{who}: one 600 KiB header -> 431", port, head(b"/ok", b"x-big: " + b"a" * 600_000 + b"\r\n"), 431)
    expect_status(f"{who}: 200 headers -> 431", port, head(b"/ok", b"".join(b"x-h%d: v\r\n" % i for i in range(200))), 431)

# --- oversized bodies (413), and a body under the limit still passes.
big = b"a" * 4096
post = lambda path, n: b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % n
expect_status("gateway: 4 KiB body in 2 writes to a buffering filter (limit 1 KiB) -> 413", GW,
              post(b"/buffered", 4096) + big[:2048], 413, trickle=[big[2048:]])
# Informational: the limit counts what a filter holds back across reads
# (docs/admin.md); a body that arrives whole in one read is never held back.
status, _, took, ended = raw(GW, post(b"/buffered", 4096) + big)
emit(True, "gateway (informational): 4 KiB body in the same packet as the headers, buffering filter, limit 1 KiB",
     f"got {status} ({ended} after {took} s)")
http("gateway: 4 KiB body to a function route -> 413", "/hello", 413, method="POST", body=big, kind="body_too_large")
http("gateway: 1000 B body to a function route -> 200", "/hello", 200, method="POST", body=b"a" * 1000)
http("serve --max-body-bytes 1024: 4 KiB body -> 413", "/", 413, port=SV, method="POST", body=big, kind="body_too_large")
expect_status("gateway: 4 KiB chunked body to a function route -> 413", GW,
              b"POST /hello HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1000\r\n" + big + b"\r\n0\r\n\r\n", 413)

# --- malformed HTTP (400)
malformed = {
    "request line without version": b"HELLO\r\n\r\n",
    "header line without a colon": head(b"/ok", b"Bad Header\r\n"),
    "HTTP/9.1": b"GET /ok HTTP/9.1\r\nHost: x\r\n\r\n",
    "Content-Length: abc": head(b"/ok", b"Content-Length: abc\r\n"),
    "two different Content-Lengths": b"POST /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
}
for what, data in malformed.items():
    for port, who in ((GW, "gateway"), (SV, "serve")):
        expect_status(f"{who}: malformed ({what}) -> 400", port, data, 400)
bad_chunk = lambda path: b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
expect_status("gateway: malformed chunked body, function route -> 400", GW, bad_chunk(b"/hello"), 400)
expect_status("gateway: malformed chunked body, buffering filter route -> 400", GW, bad_chunk(b"/buffered"), 400)
expect_status("gateway: malformed chunked body, upstream route -> 400", GW, bad_chunk(b"/ok"), 400)
for _ in range(3):
    raw(GW, bad_chunk(b"/watched"))
m = request(f"http://127.0.0.1:{ADMIN}/metrics", timeout=5)[2].decode()
healthy = [l.split()[-1] for l in m.splitlines() if l.startswith('wasmgate_upstream_node_healthy{upstream="watched"')]
emit(healthy == ["1"], "gateway: 3 malformed client bodies do not eject a healthy node (passive max_failures 3)",
     f"wasmgate_upstream_node_healthy{{upstream=\"watched\"}} = {healthy}")

# --- slow and silent clients (header_read_timeout_ms 1000), in parallel.
def slow_headers():
    status, got, took, ended = raw(GW, b"GET /ok HTTP/1.1\r\n", timeout=6,
                                   trickle=[b"x-slow-%d: v\r\n" % i for i in range(25)])
    ok = status == 408 and took <= 2.5
    emit(ok, "gateway: headers sent one line per 200 ms -> 408 after ~1 s",
         f"{'408' if status == 408 else 'no response, connection ' + ended if status is None else status} after {took} s")
def silent():
    status, got, took, ended = raw(GW, b"", timeout=5)
    ok = status is None and ended in ("closed", "reset") and took <= 3
    emit(ok, "gateway: client connects and sends nothing -> closed (no response) after ~1 s",
         f"{status or 'no response'}, connection {ended} after {took} s")
def idle_keepalive():
    s = socket.create_connection(("127.0.0.1", GW), timeout=8)
    s.sendall(head(b"/ok"))
    s.recv(65536)
    start = time.time()
    try:
        c = s.recv(65536)
        ended = "closed" if not c else f"sent {c[:40]!r}"
    except socket.timeout:
        ended = "still open"
    took = round(time.time() - start, 2)
    s.close()
    emit(True, "gateway (informational): idle keep-alive connection after a response",
         f"{ended} after {took} s (header_read_timeout 1 s)")
def stalled_body(path, name, box):
    status, got, took, ended = raw(GW, b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc", timeout=10)
    box.append((status, took, ended))
    ok = status == 408 or ended in ("closed", "reset")
    emit(ok, f"gateway: body stalls after 3 of 100 bytes ({name}) -> 408 or closed within 10 s",
         f"{status or 'no response'}, {ended} after {took} s")
boxes = {"fn": [], "buf1": [], "buf2": []}
threads = [threading.Thread(target=f, args=a) for f, a in [
    (slow_headers, ()), (silent, ()), (idle_keepalive, ()),
    (stalled_body, (b"/hello", "function route", boxes["fn"])),
    (stalled_body, (b"/buffered", "buffering filter, client 1 of 2", boxes["buf1"])),
    (stalled_body, (b"/buffered", "buffering filter, client 2 of 2", boxes["buf2"])),
] + [(raw, (GW, b"POST /stalled HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc", 5)) for _ in range(3)]]
for t in threads:
    t.start()
time.sleep(1.5)
# The buffering filter's pool has 2 instances: do 2 stalled clients block everyone else?
http("gateway: a normal request to the buffering route while 2 clients stall their bodies -> 200",
     "/buffered", 200, method="POST", body=b"hello")
for t in threads:
    t.join()
m = request(f"http://127.0.0.1:{ADMIN}/metrics", timeout=5)[2].decode()
healthy = [l.split()[-1] for l in m.splitlines() if l.startswith('wasmgate_upstream_node_healthy{upstream="watched2"')]
emit(healthy == ["1"], "gateway: 3 clients stalling their bodies do not eject a healthy node (read_timeout_ms 1000, passive max_failures 3)",
     f"wasmgate_upstream_node_healthy{{upstream=\"watched2\"}} = {healthy}")

# --- upstreams
http("gateway: dead upstream -> 502 upstream_unreachable", "/dead", 502, kind="upstream_unreachable", max_s=1)
http("gateway: upstream slower than read_timeout_ms 500 -> 504 upstream_timeout", "/slow", 504, kind="upstream_timeout", max_s=1.5)
statuses = [request(f"http://127.0.0.1:{GW}/mixed/{i}", timeout=10)[0] for i in range(40)]
emit(statuses.count(200) == 40, "gateway: one dead + one healthy node, retries 1: 40 requests all 200",
     f"{statuses.count(200)} x 200, others {[s for s in statuses if s != 200]}")
m = request(f"http://127.0.0.1:{ADMIN}/metrics", timeout=5)[2].decode()
retried = [l for l in m.splitlines() if l.startswith('wasmgate_upstream_node_retries_total{upstream="mixed"')]
emit(any(float(l.split()[-1]) > 0 for l in retried), "gateway: the retries are counted", "; ".join(retried))
for path in ("/ok", "/hello"):
    http(f"gateway still serves {path} after all this", path, 200, method="POST" if path == "/hello" else "GET", body=b"x" if path == "/hello" else None)
PY
while IFS=$'\t' read -r verdict name detail; do
  check "$name" "$([ "$verdict" = PASS ]; echo $?)" "$detail"
done <"$TMP/checks.txt"
check "the python client finished in time" "$rc" "exit $rc"
for p in "$gw_pid" "$sv_pid"; do
  kill -0 "$p" 2>/dev/null
  check "process $p still running" $? ""
done
finish R7 "$((CHECKS - FAILED)) of $CHECKS checks pass"
