#!/usr/bin/env python3
"""What an open dashboard costs the gateway (issue 17, docs/benchmarks.md
"Dashboard cost"): one `wasmgate run` (one worker, CPU 0) serving a route with
the Rust header filter, wrk -t1 -c32 on CPU 1; alternately with no dashboard
open and with headless Chromium (CPU 1) showing the overview, which polls
/status, /stats/history and /metrics every 2 s. Reports req/s and the
gateway's CPU time per request, medians over rounds; and, without traffic,
the gateway's CPU time per second with and without the page.
Usage: bench/dashboard_cost.py [--rounds 3] [--seconds 5]
"""

import os
import sys

# bench/http.py, next to this script, would shadow the standard library's
# http package.
HERE = os.path.dirname(os.path.abspath(__file__))
from procstat import cpu_seconds  # noqa: E402 (from this folder, before it leaves sys.path)
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import argparse
import json
import re
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request

from playwright.sync_api import sync_playwright

ROOT = os.path.dirname(HERE)
WASMGATE = os.path.join(ROOT, "target/release/wasmgate")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    args = ap.parse_args()
    os.sched_setaffinity(0, {1})  # this script, and the browser it starts, on CPU 1
    port, admin = free_port(), free_port()
    tmp = tempfile.mkdtemp(prefix="wasmgate-dashboard-cost-")
    config = os.path.join(tmp, "gw.yaml")
    with open(config, "w") as f:
        f.write(f"""listen: "127.0.0.1:{port}"
admin: "127.0.0.1:{admin}"
limits: {{threads: 1}}
plugins:
  - {{name: tag, wasm: "{ROOT}/target/wasm/add_header.wasm"}}
routes:
  - {{name: tagged, path: {{prefix: /}}, plugins: [{{plugin: tag}}], respond: {{status: 200, body: ok}}}}
""")
    gateway = subprocess.Popen(["taskset", "-c", "0", WASMGATE, "run", "-c", config, "--no-watch",
                                "--log-level", "warn"])
    try:
        deadline = time.time() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{admin}/healthz", timeout=1)
                break
            except OSError:
                if time.time() > deadline:
                    raise SystemExit("the gateway did not start")
                time.sleep(0.05)
        results = {"closed": [], "open": []}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            for _ in range(args.rounds):
                for mode in ("closed", "open"):
                    page = None
                    if mode == "open":
                        page = browser.new_page()
                        page.goto(f"http://127.0.0.1:{admin}/#overview")
                        page.wait_for_selector('body[data-loaded="overview"]')
                    before = cpu_seconds(gateway.pid)
                    out = subprocess.run(["wrk", "-t1", "-c32", f"-d{args.seconds}s",
                                          f"http://127.0.0.1:{port}/"],
                                         capture_output=True, text=True, check=True).stdout
                    cpu = cpu_seconds(gateway.pid) - before
                    requests = int(re.search(r"(\d+) requests in", out).group(1))
                    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
                    polls = page.evaluate("performance.getEntriesByType('resource').length") if page else 0
                    if page:
                        page.close()
                    results[mode].append({"rps": rps, "cpu_us_per_request": cpu * 1e6 / requests,
                                          "dashboard_requests": polls})
            # Without traffic: the gateway's CPU per second of wall time,
            # no page against the overview polling (what a page costs).
            idle = {}
            for mode in ("closed", "open"):
                page = None
                if mode == "open":
                    page = browser.new_page()
                    page.goto(f"http://127.0.0.1:{admin}/#overview")
                    page.wait_for_selector('body[data-loaded="overview"]')
                before = cpu_seconds(gateway.pid)
                time.sleep(2 * args.seconds)
                idle[mode] = (cpu_seconds(gateway.pid) - before) * 1000 / (2 * args.seconds)
                if page:
                    page.close()
            browser.close()
    finally:
        gateway.terminate()
        gateway.wait(10)
    summary = {mode: {"rps": statistics.median(r["rps"] for r in runs),
                      "cpu_us_per_request": statistics.median(r["cpu_us_per_request"] for r in runs)}
               for mode, runs in results.items()}
    summary["open_vs_closed_rps"] = summary["open"]["rps"] / summary["closed"]["rps"]
    summary["idle_cpu_ms_per_second"] = idle
    summary["runs"] = results
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench/results/dashboard_cost.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=1))


if __name__ == "__main__":
    main()
