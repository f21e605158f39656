#!/usr/bin/env python3
"""Helpers for the reliability scripts (python3 stdlib only).

  relib.py upstream --port P [--delay S]   a small HTTP/1.1 keep-alive upstream
  relib.py load --url U [--url U2 ...] --threads N --stop FILE --out JSON
                                           requests until FILE exists; counts failures

Imported by the scripts' inline python for `request` (one HTTP call with a
client timeout) and `percentile`.
"""
import argparse
import http.client
import json
import os
import socket
import socketserver
import sys
import threading
import time
import urllib.parse


# ---------------------------------------------------------------- upstream

class Upstream(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024


def make_handler(delay):
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    return
                if line in (b"\r\n", b"\n"):
                    continue
                parts = line.split()
                if len(parts) != 3:
                    self.wfile.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    return
                path = parts[1].decode("latin-1")
                headers = {}
                while True:
                    h = self.rfile.readline(65537)
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        self.rfile.read(size + 2)
                        if size == 0:
                            break
                else:
                    n = int(headers.get("content-length") or 0)
                    if n:
                        self.rfile.read(n)
                wait = delay if delay else (3.0 if "/slow" in path else 0)
                if wait:
                    time.sleep(wait)
                body = b"hello from upstream\n"
                # One write: headers and body together (no Nagle/delayed-ACK stalls).
                self.wfile.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n"
                    b"x-upstream-port: %d\r\n\r\n%s" % (len(body), self.server.server_address[1], body))
                if headers.get("connection", "").lower() == "close":
                    return
    return Handler


def run_upstream(args):
    server = Upstream(("127.0.0.1", args.port), make_handler(args.delay))
    server.serve_forever()


# ---------------------------------------------------------------- client

def request(url, method="GET", body=None, headers=None, timeout=10.0, conn=None):
    """One request. Returns (status or None, headers dict, body bytes, seconds, error or None).
    With `conn` (an http.client.HTTPConnection) the connection is reused."""
    u = urllib.parse.urlsplit(url)
    own = conn is None
    if own:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    path = u.path or "/"
    if u.query:
        path += "?" + u.query
    start = time.perf_counter()
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        took = time.perf_counter() - start
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
        return resp.status, hdrs, data, took, None
    except Exception as e:  # noqa: BLE001 - every failure is a result here
        conn.close()
        return None, {}, b"", time.perf_counter() - start, f"{type(e).__name__}: {e}"
    finally:
        if own:
            conn.close()


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(p / 100.0 * (len(s) - 1)))))
    return s[k]


# ---------------------------------------------------------------- load

def run_load(args):
    """Keep-alive clients until the stop file appears; every non-2xx or error is
    a failure, recorded with its reason. Optionally counts a response header's values."""
    lock = threading.Lock()
    totals = {"requests": 0, "ok": 0, "failed": 0, "failures": {}, "header_values": {}}
    stop = lambda: os.path.exists(args.stop)
    deadline = time.time() + args.max_seconds

    def worker(i):
        url = args.url[i % len(args.url)]
        u = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=args.timeout)
        local = {"requests": 0, "ok": 0, "failed": 0, "failures": {}, "header_values": {}}
        while not stop() and time.time() < deadline:
            status, hdrs, data, _, err = request(url, conn=conn, timeout=args.timeout)
            local["requests"] += 1
            if err is None and 200 <= status < 300:
                local["ok"] += 1
                if args.header:
                    v = hdrs.get(args.header, "<absent>")
                    local["header_values"][v] = local["header_values"].get(v, 0) + 1
            else:
                local["failed"] += 1
                reason = err or f"{status} {data[:160].decode('utf-8', 'replace')}"
                local["failures"][reason] = local["failures"].get(reason, 0) + 1
                if err is not None:
                    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=args.timeout)
        with lock:
            for k in ("requests", "ok", "failed"):
                totals[k] += local[k]
            for k in ("failures", "header_values"):
                for r, n in local[k].items():
                    totals[k][r] = totals[k].get(r, 0) + n

    start = time.time()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    totals["seconds"] = round(time.time() - start, 2)
    with open(args.out, "w") as f:
        json.dump(totals, f)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("upstream")
    up.add_argument("--port", type=int, required=True)
    up.add_argument("--delay", type=float, default=0.0)
    ld = sub.add_parser("load")
    ld.add_argument("--url", action="append", required=True)
    ld.add_argument("--threads", type=int, default=4)
    ld.add_argument("--stop", required=True)
    ld.add_argument("--out", required=True)
    ld.add_argument("--header", default=None)
    ld.add_argument("--timeout", type=float, default=10.0)
    ld.add_argument("--max-seconds", type=float, default=300.0)
    args = ap.parse_args()
    {"upstream": run_upstream, "load": run_load}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
