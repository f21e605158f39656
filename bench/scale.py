#!/usr/bin/env python3
"""Scale measurements of issue 15 (docs/benchmarks.md, "Scale: routes,
start-up, instances"):

  routes     1, 100 and 10,000 routes (each a host and a path prefix), the
             request matching the last one; one gateway worker on CPU 0, wrk
             -c32 on CPU 1; req/s, CPU per request and RSS, rounds alternating.
  startup    `wasmgate run` with 20 plugins from a warm compile cache: time
             from exec until the listener answers a request.
  instances  1,000 concurrent calls of the C PDK's hello plugin (`fetch` of a
             local URL that answers after 3 s), so that 1,000 pooled instances
             are alive at once: the server's RSS before, during and after.

Writes bench/results/scale.json. Usage: bench/scale.py [--rounds 3] [--seconds 4]
"""

import os
import sys

# bench/http.py, next to this script, would shadow the standard library's
# http package.
HERE = os.path.dirname(os.path.abspath(__file__))
from procstat import cpu_seconds  # noqa: E402 (from this folder, before it leaves sys.path)
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import argparse
import http.server
import json
import re
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(HERE)
WASMGATE = os.path.join(ROOT, "target/release/wasmgate")
WASM = os.path.join(ROOT, "target/wasm")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) / 1024


def wait_http(url, deadline_s=30, headers=None):
    deadline = time.time() + deadline_s
    while True:
        try:
            request = urllib.request.Request(url, headers=headers or {})
            with urllib.request.urlopen(request, timeout=1) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            if time.time() > deadline:
                raise SystemExit(f"{url} never answered")
            time.sleep(0.001)


def routes(tmp, rounds, seconds):
    counts = [1, 100, 10000]
    configs = {}
    for n in counts:
        port = free_port()
        path = os.path.join(tmp, f"routes{n}.yaml")
        with open(path, "w") as f:
            f.write(f'listen: "127.0.0.1:{port}"\nlimits: {{threads: 1}}\nroutes:\n')
            for i in range(n):
                f.write(f'  - {{name: r{i}, hosts: ["h{i}.example"], path: {{prefix: "/p{i}/"}}, '
                        f'respond: {{status: 200, body: ok}}}}\n')
        configs[n] = (path, port)
    results = {n: [] for n in counts}
    for _ in range(rounds):
        for n in counts:
            path, port = configs[n]
            started = time.time()
            server = subprocess.Popen(["taskset", "-c", "0", WASMGATE, "run", "-c", path, "--no-watch",
                                       "--log-level", "warn"])
            host = f"h{n - 1}.example"
            url = f"http://127.0.0.1:{port}/p{n - 1}/x"
            assert wait_http(url, headers={"Host": host}) == 200
            ready = time.time() - started
            idle_rss = rss_mb(server.pid)
            before = cpu_seconds(server.pid)
            out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c32", f"-d{seconds}s",
                                  "-H", f"Host: {host}", url], capture_output=True, text=True, check=True).stdout
            cpu = cpu_seconds(server.pid) - before
            requests = int(re.search(r"(\d+) requests in", out).group(1))
            non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
            assert non2xx is None, out
            results[n].append({"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
                               "cpu_us_per_request": cpu * 1e6 / requests,
                               "rss_mb": rss_mb(server.pid), "idle_rss_mb": idle_rss,
                               "ready_s": ready})
            server.terminate()
            server.wait(10)
    summary = {}
    for n in counts:
        runs = results[n]
        summary[n] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    for n in counts:
        summary[n]["rps_vs_1_route"] = summary[n]["rps"] / summary[1]["rps"]
        summary[n]["cpu_vs_1_route"] = summary[n]["cpu_us_per_request"] / summary[1]["cpu_us_per_request"]
    summary["memory_per_route_kb"] = (summary[10000]["idle_rss_mb"] - summary[1]["idle_rss_mb"]) * 1024 / 9999
    return {"summary": summary, "runs": results}


def startup(tmp, runs=5):
    modules = ["add_header", "go_add_header", "hello", "count_vowels"]
    port = free_port()
    path = os.path.join(tmp, "startup.yaml")
    with open(path, "w") as f:
        f.write(f'listen: "127.0.0.1:{port}"\nplugins:\n')
        for i in range(20):
            f.write(f'  - {{name: p{i}, wasm: "{WASM}/{modules[i % 4]}.wasm"}}\n')
        f.write("routes:\n")
        for i in range(20):
            if modules[i % 4] in ("hello", "count_vowels"):
                f.write(f'  - {{name: r{i}, path: {{prefix: /f{i}/}}, function: {{plugin: p{i}}}}}\n')
            else:
                f.write(f'  - {{name: r{i}, path: {{prefix: /r{i}}}, plugins: [{{plugin: p{i}}}], '
                        f'respond: {{status: 200, body: ok}}}}\n')
    times = []
    for attempt in range(runs + 1):  # the first run warms the compile cache
        started = time.time()
        server = subprocess.Popen([WASMGATE, "run", "-c", path, "--no-watch", "--log-level", "warn"])
        assert wait_http(f"http://127.0.0.1:{port}/r0") == 200
        took = time.time() - started
        server.terminate()
        server.wait(10)
        if attempt > 0:
            times.append(took * 1000)
    return {"plugins": 20, "ms": times, "median_ms": statistics.median(times)}


class Slow(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(3)
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


class SlowServer(http.server.ThreadingHTTPServer):
    # The class attribute is what listen() uses (the default backlog of 5
    # refused some of 1,000 connections arriving at once).
    request_queue_size = 2048


def instances(count=1000):
    slow = SlowServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=slow.serve_forever, daemon=True).start()
    port = free_port()
    server = subprocess.Popen([WASMGATE, "serve", f"{WASM}/c_hello.wasm", "fetch", "--port", str(port),
                               "--pool-size", str(count), "--allow-host", "127.0.0.1",
                               "--timeout-ms", "60000", "--log-level", "warn"])
    url = f"http://127.0.0.1:{port}/"
    target = f"http://127.0.0.1:{slow.server_port}/".encode()
    try:
        deadline = time.time() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.01)
        idle = rss_mb(server.pid)
        answers = []

        def call():
            request = urllib.request.Request(url, data=target, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=60) as r:
                    answers.append(r.read())
            except Exception as e:  # noqa: BLE001 (counted below)
                answers.append(e)
        threads = [threading.Thread(target=call) for _ in range(count)]
        for t in threads:
            t.start()
        time.sleep(2.5)  # every call is now waiting on the slow server
        peak = rss_mb(server.pid)
        for t in threads:
            t.join()
        ok = sum(1 for a in answers if a == b"ok")
        failures = sorted({repr(a)[:200] for a in answers if a != b"ok"})
        if failures:
            print("failed calls:", failures, file=sys.stderr)
        time.sleep(2)
        after = rss_mb(server.pid)
        return {"instances": count, "answers_ok": ok, "idle_rss_mb": idle, "rss_mb_with_all_alive": peak,
                "rss_mb_after": after, "per_instance_kb": (peak - idle) * 1024 / count}
    finally:
        server.terminate()
        server.wait(10)
        slow.shutdown()


def plot(result):
    """docs/img/scale.png: req/s and CPU per request by route count, RSS with
    1,000 live instances, start-up times (whichever parts the result holds)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
    if "routes" in result:
        summary = result["routes"]["summary"]
        counts = [k for k in summary if k != "memory_per_route_kb"]
        ax = axes[0]
        ax.bar(range(len(counts)), [summary[c]["rps"] for c in counts], color="#3a7")
        ax.set_xticks(range(len(counts)), [f"{int(c):,} routes" for c in counts])
        ax.set_ylabel("req/s (higher is better)")
        for i, c in enumerate(counts):
            ax.annotate(f"{summary[c]['rps_vs_1_route']:.2f}x\n{summary[c]['cpu_us_per_request']:.1f} µs/req",
                        (i, summary[c]["rps"]), ha="center", va="bottom", fontsize=8)
        ax.set_ylim(0, max(summary[c]["rps"] for c in counts) * 1.3)
        ax.set_title("matching the last route, one worker", fontsize=9)
    if "instances" in result:
        inst = result["instances"]
        ax = axes[1]
        bars = [inst["idle_rss_mb"], inst["rss_mb_with_all_alive"], inst["rss_mb_after"]]
        ax.bar(range(3), bars, color=["#999", "#c44", "#44c"])
        ax.axhline(200, color="k", linestyle="--", linewidth=1)
        ax.set_xticks(range(3), ["idle", f"{inst['instances']:,} alive", "after"])
        ax.set_ylabel("RSS, MB (dashed: the 200 MB target)")
        for i, v in enumerate(bars):
            ax.annotate(f"{v:.0f}", (i, v), ha="center", va="bottom", fontsize=8)
        ax.set_title("serve c_hello: live pooled instances", fontsize=9)
    if "startup" in result:
        ax = axes[2]
        ms = result["startup"]["ms"]
        ax.bar(range(len(ms)), ms, color="#44c")
        ax.axhline(200, color="k", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(ms)), [f"start {i + 1}" for i in range(len(ms))], fontsize=8)
        ax.set_ylabel("ms to the first answer (dashed: target)")
        ax.set_title(f"run with {result['startup']['plugins']} plugins, warm cache", fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.join(ROOT, "docs", "img"), exist_ok=True)
    fig.savefig(os.path.join(ROOT, "docs", "img", "scale.png"), dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--only", choices=["routes", "startup", "instances"])
    ap.add_argument("--plot-only", action="store_true",
                    help="only draw docs/img/scale.png from bench/results/scale.json")
    args = ap.parse_args()
    out = os.path.join(ROOT, "bench/results/scale.json")
    if args.plot_only:
        with open(out) as f:
            plot(json.load(f))
        return
    tmp = tempfile.mkdtemp(prefix="wasmgate-scale-")
    result = {"date": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    if args.only and os.path.exists(out):
        # One part re-run: keep the others' last figures.
        with open(out) as f:
            result = dict(json.load(f), **result)
    if args.only in (None, "routes"):
        result["routes"] = routes(tmp, args.rounds, args.seconds)
    if args.only in (None, "startup"):
        result["startup"] = startup(tmp)
    if args.only in (None, "instances"):
        result["instances"] = instances()
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    plot(result)
    shown = dict(result)
    if "routes" in shown:
        shown["routes"] = shown["routes"]["summary"]
    print(json.dumps(shown, indent=1))


if __name__ == "__main__":
    main()
