#!/usr/bin/env python3
"""WebSocket and gRPC through wasmgate, side by side in one run (issue 31;
docs/benchmarks.md, "Protocols (issue 31)"):

  websocket  WebSocket echo, 32 connections each sending 128-byte binary
             messages ping-pong: through wasmgate (a route, no filter) and
             through nginx (proxy_pass with Upgrade), to the same upstream;
  grpc       gRPC unary echo calls (128 bytes), 32 in flight on one
             channel: straight to the server, through wasmgate (h2c
             upstream, a route without and one with a Proxy-Wasm filter
             adding a header), and through nginx's grpc_pass;
  grpc-128   the same with 128 calls in flight, so that the client and
             server's CPU, not each call's extra hop, bounds the rate.

The peers are Go (bench/protopeers: gorilla/websocket, grpc-go), built here,
so that they cost little beside the proxy measured. The proxies (one worker,
one thread each) are pinned to CPU 0; peers and load clients to CPU 1.
Scenarios rotate round by round. Beside messages (calls) per second and
p99, the proxy's CPU time per message (call) from /proc, the steadier
measure on this machine; and the peers' CPU per message (server and load
client) with the upstream's read calls per message, which show whether
CPU 1 bounds the rate and how a proxy's hop changes the peers' batches.

--compare BINARY runs a second wasmgate, that binary (another commit's
build), beside the first with the same configuration, as the proxy
"compared" in every chosen scenario: an A/B of two builds in one run
(its gRPC figures plotted to docs/img/protocols-compared.png).

Writes bench/results/protocols.json and (when every scenario ran)
docs/img/protocols.png, prints a Markdown table. Usage:
bench/protocols.py [--rounds 3] [--seconds 5] [--scenarios websocket,grpc,grpc-128]
                   [--compare BINARY]
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
from procstat import cpu_seconds, start_nginx, wait_port  # noqa: E402 (from this folder, before it leaves sys.path)
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import argparse
import json
import resource
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(HERE)
WASMGATE = os.path.join(ROOT, "target/release/wasmgate")
PEERS = os.path.join(ROOT, "target/bench-bin/protopeers")
WS_UP, GRPC_UP, NGINX_WS, NGINX_GRPC, GW, GW_ADMIN = 18481, 18482, 18483, 18484, 18485, 18486
COMPARED, COMPARED_ADMIN = 18487, 18488
# (scenario, proxy): proxy None is the client calling the server directly.
CASES = [
    ("websocket", "nginx"), ("websocket", "wasmgate"),
    ("grpc", None), ("grpc", "nginx"), ("grpc", "wasmgate"), ("grpc", "wasmgate+filter"),
    ("grpc-128", None), ("grpc-128", "nginx"), ("grpc-128", "wasmgate"),
]
CONNECTIONS, SIZE = 32, 128


def build_peers():
    os.makedirs(os.path.dirname(PEERS), exist_ok=True)
    subprocess.run(["go", "build", "-o", PEERS, "."], cwd=os.path.join(HERE, "protopeers"), check=True)


def start(tmp, compare):
    processes = {}
    for name, port in (("ws-echo", WS_UP), ("grpc-echo", GRPC_UP)):
        processes[name] = subprocess.Popen(["taskset", "-c", "1", PEERS, name, str(port)],
                                           env={**os.environ, "GOMAXPROCS": "1"}, stdout=subprocess.DEVNULL)
        wait_port(port, processes[name])
    processes["nginx"] = start_nginx(f"{tmp}/nginx", f"""
  upstream grpc_up {{ server 127.0.0.1:{GRPC_UP}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{NGINX_WS};
    location / {{
      proxy_pass http://127.0.0.1:{WS_UP}; proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection "upgrade";
      proxy_read_timeout 300s;
    }}
  }}
  server {{
    listen 127.0.0.1:{NGINX_GRPC} http2;
    location / {{ grpc_pass grpc://grpc_up; }}
  }}""")
    for port in (NGINX_WS, NGINX_GRPC):
        wait_port(port, processes["nginx"])
    config = f"{tmp}/wasmgate.yaml"
    with open(config, "w") as f:
        f.write(f"""listen: 127.0.0.1:{GW}
admin: 127.0.0.1:{GW_ADMIN}
limits: {{threads: 1}}
access_log: {{enabled: false}}
plugins:
  - {{name: tag, wasm: {ROOT}/target/wasm/add_header.wasm}}
upstreams:
  - {{name: ws, nodes: [{{address: 127.0.0.1:{WS_UP}}}]}}
  - {{name: grpc, protocol: h2c, nodes: [{{address: 127.0.0.1:{GRPC_UP}}}]}}
routes:
  - {{name: grpc-filtered, hosts: [filtered.test], path: {{prefix: /test.Echo/}}, plugins: [{{plugin: tag, conf: bench}}], upstream: grpc}}
  - {{name: grpc, path: {{prefix: /test.Echo/}}, upstream: grpc}}
  - {{name: ws, path: {{prefix: /}}, upstream: ws}}
""")
    processes["wasmgate"] = subprocess.Popen(
        ["taskset", "-c", "0", WASMGATE, "run", "-c", config, "--no-watch", "--log-level", "warn"])
    wait_port(GW, processes["wasmgate"])
    if compare:
        other = f"{tmp}/compared.yaml"
        with open(config) as f, open(other, "w") as g:
            g.write(f.read().replace(f":{GW}\n", f":{COMPARED}\n").replace(f":{GW_ADMIN}\n", f":{COMPARED_ADMIN}\n"))
        processes["compared"] = subprocess.Popen(
            ["taskset", "-c", "0", compare, "run", "-c", other, "--no-watch", "--log-level", "warn"])
        wait_port(COMPARED, processes["compared"])
    return processes


def measure(scenario, proxy, seconds, processes):
    server = {"nginx": "nginx", "wasmgate": "wasmgate", "wasmgate+filter": "wasmgate",
              "compared": "compared"}.get(proxy)
    if scenario == "websocket":
        port = {"nginx": NGINX_WS, "wasmgate": GW, "compared": COMPARED}[proxy]
        command = ["ws-load", f"ws://127.0.0.1:{port}/echo", str(CONNECTIONS), str(seconds), str(SIZE)]
    else:
        port = {None: GRPC_UP, "nginx": NGINX_GRPC, "wasmgate": GW, "wasmgate+filter": GW,
                "compared": COMPARED}[proxy]
        authority = "filtered.test" if proxy == "wasmgate+filter" else "-"
        in_flight = 128 if scenario == "grpc-128" else CONNECTIONS
        command = ["grpc-load", f"127.0.0.1:{port}", authority, str(in_flight), str(seconds), str(SIZE)]
    pid = processes[server].pid if server else None
    before = cpu_seconds(pid) if pid else 0
    # The peers' CPU too (the echo server's from /proc, the load client's
    # from its rusage): with the proxy on CPU 0 and both peers on CPU 1,
    # whether CPU 1 is what bounds the rate, and what the hop costs them.
    upstream = processes["ws-echo" if scenario == "websocket" else "grpc-echo"].pid
    upstream_before = cpu_seconds(upstream)
    reads_before = read_calls(upstream)
    client_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(["taskset", "-c", "1", PEERS, *command], capture_output=True, text=True,
                         env={**os.environ, "GOMAXPROCS": "1"})
    if out.returncode:
        sys.exit(f"{scenario} {proxy}: {out.stderr[-500:]}")
    run = json.loads(out.stdout)
    cpu = (cpu_seconds(pid) - before) if pid else 0
    client_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client_cpu = (client_after.ru_utime - client_before.ru_utime) + (client_after.ru_stime - client_before.ru_stime)
    peers_cpu = client_cpu + cpu_seconds(upstream) - upstream_before
    upstream_reads = read_calls(upstream) - reads_before
    return {"scenario": scenario, "proxy": proxy or "direct", "rate": run["per_second"],
            "count": run["messages"], "p50_us": run["p50_us"], "p99_us": run["p99_us"],
            "errors": run["errors"], "cpu_us": cpu / max(run["messages"], 1) * 1e6,
            "peers_cpu_us": peers_cpu / max(run["messages"], 1) * 1e6,
            "upstream_reads_per_message": upstream_reads / max(run["messages"], 1)}


def read_calls(pid):
    """The read system calls a process has made (`syscr` of /proc/<pid>/io):
    how many pieces the messages reached the upstream in."""
    with open(f"/proc/{pid}/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("syscr:"))


def pyplot():
    """matplotlib's pyplot drawing to files, or None (said) when it is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)", file=sys.stderr)
        return None
    return plt


def plot(result):
    plt = pyplot()
    if plt is None:
        return
    s = result["summary"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    labels = ["WebSocket\nwasmgate / nginx", "gRPC, 32\nwasmgate / direct", "gRPC, 32\nwasmgate / nginx",
              "gRPC, 32, filter\nwasmgate / direct", "gRPC, 128\nwasmgate / direct",
              "gRPC, 128\nwasmgate / nginx"]
    rates = [s["websocket wasmgate"]["rate"] / s["websocket nginx"]["rate"],
             s["grpc wasmgate"]["rate"] / s["grpc direct"]["rate"],
             s["grpc wasmgate"]["rate"] / s["grpc nginx"]["rate"],
             s["grpc wasmgate+filter"]["rate"] / s["grpc direct"]["rate"],
             s["grpc-128 wasmgate"]["rate"] / s["grpc-128 direct"]["rate"],
             s["grpc-128 wasmgate"]["rate"] / s["grpc-128 nginx"]["rate"]]
    bars = axes[0].bar(range(len(rates)), rates, 0.6, color="tab:orange")
    axes[0].bar_label(bars, fmt="%.2f")
    axes[0].axhline(1.0, color="tab:blue", linewidth=1)
    axes[0].axhline(0.8, color="tab:gray", linewidth=1, linestyle="--")
    axes[0].set_xticks(range(len(rates)), labels, fontsize=7)
    axes[0].set_title("messages (calls) per second, ratio (higher is better)", fontsize=10)
    cpu_labels = ["WebSocket\nwasmgate / nginx", "gRPC\nwasmgate / nginx"]
    cpu = [s["websocket wasmgate"]["cpu_us"] / s["websocket nginx"]["cpu_us"],
           s["grpc wasmgate"]["cpu_us"] / s["grpc nginx"]["cpu_us"]]
    bars = axes[1].bar(range(2), cpu, 0.5, color="tab:orange")
    axes[1].bar_label(bars, fmt="%.2f")
    axes[1].axhline(1.0, color="tab:blue", linewidth=1, label="nginx = 1.0")
    axes[1].set_xticks(range(2), cpu_labels, fontsize=8)
    axes[1].set_title("proxy CPU per message (call), ratio (lower is better)", fontsize=10)
    axes[1].legend(loc="lower right")
    fig.suptitle(f"WebSocket and gRPC through wasmgate, nginx and direct (medians of {result['rounds']} rounds)")
    fig.tight_layout()
    fig.savefig(os.path.join(ROOT, "docs", "img", "protocols.png"), dpi=110)


def plot_compared(result, scenarios):
    """This build against --compare's, per gRPC scenario: calls per second
    over direct's, and the upstream's reads per call."""
    scenarios = [x for x in scenarios if x.startswith("grpc")]
    plt = pyplot() if scenarios else None
    if plt is None:
        return
    s = result["summary"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.38
    for i, (proxy, label, color) in enumerate((("compared", "compared build", "tab:gray"),
                                                ("wasmgate", "this build", "tab:orange"))):
        at = [j + (i - 0.5) * width for j in range(len(scenarios))]
        rates = [s[f"{x} {proxy}"]["rate"] / s[f"{x} direct"]["rate"] for x in scenarios]
        bars = axes[0].bar(at, rates, width, color=color, label=label)
        axes[0].bar_label(bars, fmt="%.2f")
        reads = [s[f"{x} {proxy}"]["upstream_reads_per_message"] for x in scenarios]
        bars = axes[1].bar(at, reads, width, color=color, label=label)
        axes[1].bar_label(bars, fmt="%.3f")
    direct = [s[f"{x} direct"]["upstream_reads_per_message"] for x in scenarios]
    axes[1].scatter(range(len(scenarios)), direct, color="tab:blue", zorder=3, label="direct")
    axes[0].axhline(0.8, color="tab:gray", linewidth=1, linestyle="--")
    for ax, corner in zip(axes, ("lower right", "upper right")):
        ax.set_xticks(range(len(scenarios)), scenarios)
        ax.legend(loc=corner, fontsize=8)
    axes[0].set_title("calls per second over direct (higher is better)", fontsize=10)
    axes[1].set_title("the upstream's read calls per call (lower is better)", fontsize=10)
    fig.suptitle(f"gRPC through two wasmgate builds side by side (medians of {result['rounds']} rounds)")
    fig.tight_layout()
    fig.savefig(os.path.join(ROOT, "docs", "img", "protocols-compared.png"), dpi=110)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--scenarios", default="websocket,grpc,grpc-128",
                        help="a subset while working on one (no plot then)")
    parser.add_argument("--compare", metavar="BINARY",
                        help="another wasmgate build, run beside this one as the proxy 'compared'")
    args = parser.parse_args()
    chosen = args.scenarios.split(",")
    known = {scenario for scenario, _ in CASES}
    if not chosen or not set(chosen) <= known:
        sys.exit(f"--scenarios: {args.scenarios!r}; choose from {', '.join(sorted(known))}")
    cases = [c for c in CASES if c[0] in chosen]
    if args.compare:
        cases += [(scenario, "compared") for scenario in chosen]
    for tool in ("nginx", "go", "taskset"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode:
            sys.exit(f"{tool} is missing: scripts/install-deps.sh --bench")
    build_peers()
    tmp = tempfile.mkdtemp(prefix="wasmgate-protocols-bench.")
    processes = start(tmp, args.compare)
    try:
        for scenario, proxy in cases:  # warm-up, and a check that every path answers
            run = measure(scenario, proxy, 1, processes)
            if run["count"] == 0 or run["errors"]:
                sys.exit(f"{scenario} through {proxy}: {run}")
        load_before = open("/proc/loadavg").read().split()[:3]
        runs = []
        for r in range(1, args.rounds + 1):
            for scenario, proxy in (cases if r % 2 else cases[::-1]):
                run = measure(scenario, proxy, args.seconds, processes)
                run["round"] = r
                runs.append(run)
                print(json.dumps(run), file=sys.stderr)
    finally:
        for p in processes.values():
            p.terminate()
        for p in processes.values():
            p.wait()
        subprocess.run(["rm", "-rf", tmp])
    summary = {}
    for scenario, proxy in cases:
        key = f"{scenario} {proxy or 'direct'}"
        mine = [r for r in runs if r["scenario"] == scenario and r["proxy"] == (proxy or "direct")]
        summary[key] = {k: statistics.median(r[k] for r in mine) for k in ("rate", "p50_us", "p99_us", "cpu_us", "peers_cpu_us", "upstream_reads_per_message")}
    result = {"rounds": args.rounds, "seconds": args.seconds, "connections": CONNECTIONS, "size": SIZE,
              "compared": args.compare,
              "loadavg_before": load_before, "loadavg_after": open("/proc/loadavg").read().split()[:3],
              "runs": runs, "summary": summary}
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "protocols.json"), "w") as f:
        json.dump(result, f, indent=1)
    if all(c in cases for c in CASES):
        plot(result)
    if args.compare:
        plot_compared(result, chosen)
    print("| case | per second | p50 µs | p99 µs | proxy CPU µs per message | peers' CPU µs per message | upstream reads per message |")
    print("|---|---|---|---|---|---|---|")
    for key, v in summary.items():
        cpu = f"{v['cpu_us']:.1f}" if not key.endswith("direct") else "-"
        print(f"| {key} | {v['rate']:,.0f} | {v['p50_us']:.0f} | {v['p99_us']:.0f} | {cpu} | {v['peers_cpu_us']:.1f} | {v['upstream_reads_per_message']:.3f} |")
    print(f"\nerrors: {sum(r['errors'] for r in runs)}")


if __name__ == "__main__":
    main()
