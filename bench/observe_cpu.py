#!/usr/bin/env python3
"""What the access log and tracing cost in CPU time per request (issue 32's
target: access log + 1 % tracing within 3 % of a request's CPU), side by
side in one run; docs/benchmarks.md, "Access log and tracing: CPU time".

Four gateways, the same route (one Rust filter, proxied to an nginx
upstream), each one process with one worker thread:

  off        no log, no tracing (the baseline)
  log        the access log, JSON lines to a file
  trace1     tracing at 1 % to a Jaeger over OTLP/gRPC
  log+trace1 both

All gateways and the upstream are pinned to CPU 0, wrk to CPU 1. Each round
runs every case once (in rotated order, so machine noise meets them alike);
the figure is the gateway process's CPU time (user + system, from /proc:
every thread, the log writer's and the span exporter's included) over the
requests wrk completed. Reported: each case's median over the rounds and its
ratio to `off` in the same round (median of the per-round ratios).

bench/instructions.sh counts the same cases' instructions (user space only);
this is the whole CPU, the kernel's share of the sockets included.

Writes bench/results/observe_cpu.json; prints a Markdown table.
Usage: bench/observe_cpu.py [--rounds 7] [--seconds 5]
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
from procstat import cpu_seconds, start_nginx, wait_port  # noqa: E402 (from this folder, before it leaves sys.path)
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import argparse
import json
import re
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(HERE)
WASMGATE = os.path.join(ROOT, "target/release/wasmgate")
JAEGER = os.path.join(ROOT, "target/test-bin/jaeger")
UP, OTLP, JAEGER_HTTP, JAEGER_GRPC = 18471, 18472, 18473, 18474
CASES = {  # name: (port, the configuration's observing lines)
    "off": (18475, "access_log: {enabled: false}"),
    "log": (18476, "access_log: {path: TMP/log.log}"),
    "trace1": (18477, f"access_log: {{enabled: false}}\ntracing: {{endpoint: \"http://127.0.0.1:{OTLP}\", sample_ratio: 0.01}}"),
    "log+trace1": (18478, f"access_log: {{path: TMP/log-trace.log}}\ntracing: {{endpoint: \"http://127.0.0.1:{OTLP}\", sample_ratio: 0.01}}"),
}


def start(tmp):
    processes = {"upstream": start_nginx(
        f"{tmp}/upstream",
        f'server {{ listen 127.0.0.1:{UP}; location / {{ return 200 "hello from upstream\\n"; }} }}')}
    wait_port(UP, processes["upstream"])
    with open(f"{tmp}/jaeger.yaml", "w") as f:
        f.write(f"""service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines: {{traces: {{receivers: [otlp], exporters: [jaeger_storage_exporter]}}}}
  telemetry: {{metrics: {{level: none}}, logs: {{level: warn}}}}
extensions:
  jaeger_storage: {{backends: {{mem: {{memory: {{max_traces: 100000}}}}}}}}
  jaeger_query: {{storage: {{traces: mem}}, http: {{endpoint: 127.0.0.1:{JAEGER_HTTP}}}, grpc: {{endpoint: 127.0.0.1:{JAEGER_GRPC}}}}}
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:{OTLP}}}}}}}}}
exporters: {{jaeger_storage_exporter: {{trace_storage: mem}}}}
""")
    # Jaeger on the load generator's CPU: its work is not the gateway's.
    processes["jaeger"] = subprocess.Popen(
        ["taskset", "-c", "1", JAEGER, "--config", f"{tmp}/jaeger.yaml"], cwd=tmp,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(OTLP, processes["jaeger"])
    wasm = os.path.join(ROOT, "target/wasm/add_header.wasm")
    for name, (port, observing) in CASES.items():
        config = f"{tmp}/{name}.yaml"
        with open(config, "w") as f:
            f.write(f"""listen: 127.0.0.1:{port}
limits: {{threads: 1}}
{observing.replace("TMP", tmp)}
plugins:
  - {{name: add_header, wasm: {wasm}}}
upstreams:
  - {{name: up, nodes: [{{address: 127.0.0.1:{UP}}}]}}
routes:
  - {{name: proxy-rust, plugins: [{{plugin: add_header, conf: bench}}], upstream: up}}
""")
        processes[name] = subprocess.Popen(
            ["taskset", "-c", "0", WASMGATE, "run", "-c", config, "--no-watch", "--log-level", "warn"])
        wait_port(port, processes[name])
    return processes


def measure(name, seconds, pid):
    port = CASES[name][0]
    before = cpu_seconds(pid)
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c16", f"-d{seconds}s",
                          f"http://127.0.0.1:{port}/"], capture_output=True, text=True, check=True).stdout
    cpu = cpu_seconds(pid) - before
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    if re.search(r"Non-2xx|Socket errors", out):
        sys.exit(f"{name}: wrk saw errors:\n{out}")
    return {"requests": requests, "rps": requests / seconds, "cpu_us": cpu / requests * 1e6}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=int, default=5)
    args = parser.parse_args()
    if not os.access(JAEGER, os.X_OK):
        sys.exit(f"{JAEGER} is missing: scripts/install-deps.sh builds it")
    tmp = tempfile.mkdtemp(prefix="wasmgate-observe-cpu.")
    processes = start(tmp)
    rounds = []
    try:
        names = list(CASES)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            rounds.append({name: measure(name, args.seconds, processes[name].pid) for name in order})
            print(f"round {r + 1}: " + ", ".join(
                f"{n} {rounds[-1][n]['cpu_us']:.2f} us" for n in names), file=sys.stderr)
    finally:
        for process in processes.values():
            process.terminate()
    summary = {}
    for name in CASES:
        cpu = [r[name]["cpu_us"] for r in rounds]
        ratio = [r[name]["cpu_us"] / r["off"]["cpu_us"] for r in rounds]
        summary[name] = {"cpu_us": statistics.median(cpu), "rps": statistics.median(r[name]["rps"] for r in rounds),
                         "ratio": statistics.median(ratio), "ratios": ratio}
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results/observe_cpu.json"), "w") as f:
        json.dump({"rounds": rounds, "summary": summary, "seconds": args.seconds}, f, indent=1)
    print("| one Rust filter, proxied | CPU per request | over off | req/s (c=16) |")
    print("|---|---|---|---|")
    for name, s in summary.items():
        over = "-" if name == "off" else f"{(s['ratio'] - 1) * 100:+.1f} %"
        print(f"| {name} | {s['cpu_us']:.2f} us | {over} | {s['rps']:,.0f} |")


if __name__ == "__main__":
    main()
