#!/usr/bin/env python3
"""wasi:http components (issue 33; docs/benchmarks.md, "Components"), side by
side in one run:

  wasmtime-serve     `wasmtime serve` of wasmtime-cli 48.0.8 (the runtime
                     version wasmgate pins), built from crates.io by
                     scripts/install-deps.sh --bench, with the pooling
                     allocator on (`-O pooling-allocator=y`; copy-on-write
                     memory images are wasmtime's default) and `-S cli=y`
                     (the Rust component imports wasi:cli/environment)
  wasmgate-component `wasmgate serve component_rust.wasm`
  wasmgate-extism    `wasmgate serve hello.wasm hello`: wasmgate's own Extism
                     hello, the issue's second yardstick (its instances are
                     reused: no fresh instance per request)
  extism-isolated    the same with `--isolation`: a fresh instance per
                     request, the isolation components have
  gateway-component  `wasmgate run`, a route whose endpoint is the component
  gateway-filtered   the same behind one Proxy-Wasm filter (add_header, Rust
                     SDK): what a component route behind a filter costs

The component is plugins/component/rust/http_handler (GET / answers `hello
from rust component`), a fresh instance per request everywhere (the
wasi:http contract; `wasmtime serve` does the same). Every server is one
process pinned to CPU 0 with one worker thread; wrk runs on CPU 1, at c=1 and
c=100. Per run: req/s, p99 (wrk), the server's CPU time per request (/proc),
its resident memory at the end of the run and its peak. Servers rotate round
by round so machine noise meets all of them alike.

Writes bench/results/components.json and docs/img/components.png, prints a
Markdown table. Usage: bench/components.py [--rounds 3] [--seconds 5]
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
from procstat import cpu_seconds, wait_port  # noqa: E402 (from this folder, before it leaves sys.path)
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import argparse
import json
import re
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(HERE)
WASMGATE = os.path.join(ROOT, "target/release/wasmgate")
WASMTIME = os.path.join(ROOT, "target/bench-bin/bin/wasmtime")
COMPONENT = os.path.join(ROOT, "target/wasm/component_rust.wasm")
HELLO = os.path.join(ROOT, "target/wasm/hello.wasm")
FILTER = os.path.join(ROOT, "target/wasm/add_header.wasm")
POST_JOHN_DOE = os.path.join(HERE, "post-john-doe.lua")
PORTS = {"wasmtime-serve": 18471, "wasmgate-component": 18472, "wasmgate-extism": 18473,
         "gateway-component": 18474, "extism-isolated": 18475}
SERVERS = ["wasmtime-serve", "wasmgate-component", "wasmgate-extism", "extism-isolated", "gateway-component",
           "gateway-filtered"]
CONNECTIONS = [1, 100]


def start(tmp):
    pinned = ["taskset", "-c", "0"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    processes = {
        "wasmtime-serve": subprocess.Popen(
            pinned + [WASMTIME, "serve", "--addr", f"127.0.0.1:{PORTS['wasmtime-serve']}",
                      "-O", "pooling-allocator=y", "-S", "cli=y", COMPONENT], **quiet),
        "wasmgate-component": subprocess.Popen(
            pinned + [WASMGATE, "serve", COMPONENT, "--port", str(PORTS["wasmgate-component"]),
                      "--threads", "1", "--pool-size", "256", "--access-log", "off"], **quiet),
        "wasmgate-extism": subprocess.Popen(
            pinned + [WASMGATE, "serve", HELLO, "hello", "--port", str(PORTS["wasmgate-extism"]),
                      "--threads", "1", "--pool-size", "256", "--access-log", "off"], **quiet),
        "extism-isolated": subprocess.Popen(
            pinned + [WASMGATE, "serve", HELLO, "hello", "--port", str(PORTS["extism-isolated"]),
                      "--threads", "1", "--pool-size", "256", "--isolation", "--access-log", "off"], **quiet),
    }
    config = f"{tmp}/wasmgate.yaml"
    with open(config, "w") as f:
        f.write(f"""listen: 127.0.0.1:{PORTS['gateway-component']}
access_log: {{enabled: false}}
limits: {{threads: 1}}
plugins:
  - {{name: h, wasm: {FILTER}}}
  - {{name: handler, wasm: {COMPONENT}, pool_size: 256}}
routes:
  - {{name: filtered, headers: {{x-route: filtered}}, plugins: [{{plugin: h, conf: bench}}], component: {{plugin: handler}}}}
  - {{name: direct, component: {{plugin: handler}}}}
""")
    processes["gateway"] = subprocess.Popen(
        pinned + [WASMGATE, "run", "-c", config, "--no-watch", "--log-level", "warn"], **quiet)
    for name, port in PORTS.items():
        wait_port(port, processes["gateway" if name.startswith("gateway") else name])
    return processes


def process_of(server):
    return "gateway" if server.startswith("gateway") else server


def wrk_args(server):
    port = PORTS["gateway-component" if server.startswith("gateway") else server]
    url = f"http://127.0.0.1:{port}/"
    if server in ("wasmgate-extism", "extism-isolated"):
        return ["-s", POST_JOHN_DOE, url]
    if server == "gateway-filtered":
        return ["-H", "x-route: filtered", url]
    return [url]


def check(server):
    """A wrong answer would be fast: each server must give its hello."""
    args = wrk_args(server)
    url = args[-1]
    curl = ["curl", "-sf", url]
    if server in ("wasmgate-extism", "extism-isolated"):
        curl += ["-d", "John Doe"]
        want = "Hello John Doe"
    else:
        want = "hello from rust component"
    if server == "gateway-filtered":
        curl += ["-H", "x-route: filtered", "-D", "-"]
    out = subprocess.run(curl, capture_output=True, text=True).stdout
    if want not in out or (server == "gateway-filtered" and "x-seen-path" not in out.lower()):
        sys.exit(f"{server}: {url} answered {out!r}")


def memory_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        text = f.read()
    return (int(re.search(r"VmRSS:\s+(\d+)", text).group(1)),
            int(re.search(r"VmHWM:\s+(\d+)", text).group(1)))


def latency_ms(text, label):
    m = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
    return float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]


def measure(server, connections, seconds, pid):
    before = cpu_seconds(pid)
    threads = "1" if connections == 1 else "2"
    out = subprocess.run(["taskset", "-c", "1", "wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s",
                          "--latency", *wrk_args(server)], capture_output=True, text=True).stdout
    n = int(re.search(r"(\d+) requests in", out).group(1))
    rss, peak = memory_kib(pid)
    errors = sum(int(x) for x in re.findall(r"(?:Non-2xx or 3xx responses|connect|read|write|timeout)[: ]+(\d+)", out))
    return {"server": server, "connections": connections,
            "rate": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            "p99_ms": latency_ms(out, "99"), "cpu_us": (cpu_seconds(pid) - before) / max(n, 1) * 1e6,
            "rss_mib": rss / 1024, "peak_rss_mib": peak / 1024, "count": n, "errors": errors}


def plot(result):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)", file=sys.stderr)
        return
    summary = result["summary"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    width = 0.38
    x = list(range(len(SERVERS)))
    for ax, key, label in [(axes[0], "rate", "requests per second (higher is better)"),
                           (axes[1], "cpu_us", "server CPU µs per request (lower is better)"),
                           (axes[2], "p99_ms", "p99 latency, ms (lower is better)")]:
        for i, c in enumerate(CONNECTIONS):
            values = [summary[s][str(c)][key] for s in SERVERS]
            bars = ax.bar([p + (i - 0.5) * width for p in x], values, width, label=f"c={c}")
            ax.bar_label(bars, fmt="%.0f" if key == "rate" else "%.2f", fontsize=7)
        ax.set_xticks(x, SERVERS, rotation=20, fontsize=8)
        ax.set_title(label, fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle(f"wasi:http component (Rust hello), one worker each, fresh instance per request "
                 f"(medians of {result['rounds']} rounds)")
    fig.tight_layout()
    fig.savefig(os.path.join(ROOT, "docs", "img", "components.png"), dpi=110)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    args = parser.parse_args()
    for tool, path in (("wasmtime", WASMTIME), ("wasmgate", WASMGATE), ("component", COMPONENT)):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing ({tool}): scripts/install-deps.sh --bench, make plugins build")
    tmp = tempfile.mkdtemp(prefix="wasmgate-components-bench.")
    processes = start(tmp)
    try:
        for server in SERVERS:
            check(server)
        for server in SERVERS:  # warm-up: caches, pools, connections
            measure(server, 100, 1, processes[process_of(server)].pid)
        load_before = open("/proc/loadavg").read().split()[:3]
        runs = []
        for r in range(1, args.rounds + 1):
            for c in CONNECTIONS:
                order = SERVERS if r % 2 else SERVERS[::-1]
                for server in order:
                    run = measure(server, c, args.seconds, processes[process_of(server)].pid)
                    run["round"] = r
                    runs.append(run)
                    print(json.dumps(run), file=sys.stderr)
    finally:
        for p in processes.values():
            p.terminate()
        for p in processes.values():
            p.wait()
        subprocess.run(["rm", "-rf", tmp])
    keys = ("rate", "p99_ms", "cpu_us", "rss_mib", "peak_rss_mib")
    summary = {s: {str(c): {k: statistics.median(r[k] for r in runs if r["server"] == s and r["connections"] == c)
                            for k in keys} for c in CONNECTIONS} for s in SERVERS}
    result = {"rounds": args.rounds, "seconds": args.seconds, "loadavg_before": load_before,
              "loadavg_after": open("/proc/loadavg").read().split()[:3], "runs": runs, "summary": summary}
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "components.json"), "w") as f:
        json.dump(result, f, indent=1)
    plot(result)
    base = summary["wasmtime-serve"]
    print("| server | c | req/s | vs wasmtime serve | p99 ms | CPU µs/req | RSS MiB (end / peak) |")
    print("|---|---|---|---|---|---|---|")
    for c in CONNECTIONS:
        for s in SERVERS:
            m = summary[s][str(c)]
            print(f"| {s} | {c} | {m['rate']:,.0f} | {m['rate'] / base[str(c)]['rate']:.2f}x | {m['p99_ms']:.2f} "
                  f"| {m['cpu_us']:.1f} | {m['rss_mib']:.0f} / {m['peak_rss_mib']:.0f} |")
    print(f"\nerrors: {sum(r['errors'] for r in runs)}")


if __name__ == "__main__":
    main()
