#!/usr/bin/env python3
"""Turns bench/results/*.json(l) into the markdown tables of docs/benchmarks.md
and the plots in docs/img/. Medians over rounds; ratios against the named baseline."""
import json, os, statistics, sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RES = os.path.join(ROOT, "bench", "results")
IMG = os.path.join(ROOT, "docs", "img")

def size_label(n):
    return {0: "-", 16: "16 B", 65536: "64 KiB", 655360: "640 KiB", 6553600: "6.25 MiB"}.get(n, str(n))

def inprocess():
    path = os.path.join(RES, "inprocess.jsonl")
    if not os.path.exists(path):
        return
    rows = [json.loads(l) for l in open(path) if l.strip()]
    ns = defaultdict(list)
    for r in rows:
        ns[(r["case"], r["size"], r["impl"])].append(r["ns_per_iter"])
    keys = sorted({(c, s) for c, s, _ in ns}, key=lambda k: (["call_overhead", "fresh_instance", "echo", "consume", "reflect"].index(k[0]), k[1]))
    print("| case | size | wasmgate | extism 1.30.0 | wasmgate / extism time | throughput ratio |")
    print("|---|---|---|---|---|---|")
    plot = []
    for case, size in keys:
        ours = statistics.median(ns[(case, size, "wasmgate")])
        theirs = statistics.median(ns[(case, size, "extism-1.30.0")])
        fmt = lambda v: f"{v/1000:.2f} µs" if v < 1e6 else f"{v/1e6:.2f} ms"
        speed = f"{theirs/ours:.2f}x" if size >= 65536 else "-"
        print(f"| {case} | {size_label(size)} | {fmt(ours)} | {fmt(theirs)} | {ours/theirs:.3f} | {speed} |")
        plot.append((f"{case}\n{size_label(size)}", theirs / ours))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        os.makedirs(IMG, exist_ok=True)
        fig, ax = plt.subplots(figsize=(10, 4))
        ax.bar([p[0] for p in plot], [p[1] for p in plot], color="#3a7")
        ax.axhline(1, color="grey", lw=1)
        ax.axhline(1.5, color="#c44", lw=1, ls="--", label="throughput target 1.5x")
        ax.axhline(10, color="#44c", lw=1, ls="--", label="overhead / fresh-instance target 10x")
        ax.legend(fontsize=7, loc="upper right")
        ax.set_yscale("log")
        ax.set_ylabel("speed-up vs extism 1.30.0 (x, log)")
        ax.set_title("In-process: wasmgate vs the official extism crate (higher is better)")
        plt.xticks(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(IMG, "inprocess.png"), dpi=110)
    except ImportError:
        print("(matplotlib not installed: no plot)", file=sys.stderr)

def http():
    path = os.path.join(RES, "http.json")
    if not os.path.exists(path):
        return
    rows = json.load(open(path))
    agg = defaultdict(list)
    for r in rows:
        agg[(r["server"], r["conns"])].append(r)
    med = lambda rs, k: statistics.median(r[k] for r in rs)
    print()
    print("| server | conns | req/s | p50 | p99 | errors | peak RSS | wasmgate req/s ÷ this | CPU per request | this ÷ wasmgate's CPU per request |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    plot = defaultdict(dict)
    for conns in (1, 100):
        base = med(agg[("wasmgate", conns)], "rps")
        # Runs before CPU time was recorded have none.
        cpu = lambda rs: med(rs, "cpu_us_per_request") if all("cpu_us_per_request" in r for r in rs) else None
        base_cpu = cpu(agg[("wasmgate", conns)])
        for server in ("wasmgate", "native", "gofiber-pool", "gofiber-mutex"):
            rs = agg.get((server, conns))
            if not rs:
                continue
            rps = med(rs, "rps")
            plot[conns][server] = rps
            print(f"| {server} | {conns} | {rps:,.0f} | {med(rs,'p50_ms'):.2f} ms | {med(rs,'p99_ms'):.2f} ms | "
                  f"{sum(r['errors'] for r in rs)} | {max(r['peak_rss_kib'] for r in rs)/1024:.1f} MiB | {base/rps:.2f}x | "
                  + (f"{cpu(rs):.2f} µs | {cpu(rs)/base_cpu:.2f} |" if cpu(rs) and base_cpu else "- | - |"))
    two_panel_bars("http.png", [(f"POST 'John Doe' to hello, c={c}", plot[c]) for c in (1, 100)],
                   ["#3a7", "#888", "#c84", "#c44"])

def stack_probe():
    path = os.path.join(RES, "stack-probe.json")
    if not os.path.exists(path):
        return
    rows = json.load(open(path))
    agg = defaultdict(list)
    for r in rows:
        agg[(r["kind"], r["server"])].append(r)
    med = lambda rs, k: statistics.median(r[k] for r in rs)
    print()
    print("| test | server | req/s | p50 | p99 | vs nginx |")
    print("|---|---|---|---|---|---|")
    plot = defaultdict(dict)
    for kind in ("hello", "proxy"):
        base = med(agg[(kind, "nginx")], "rps")
        for server in ("nginx", "hyper", "pingora", "pingora-tuned"):
            rs = agg.get((kind, server))
            if not rs:
                continue
            rps = med(rs, "rps")
            plot[kind][server] = rps
            print(f"| {kind} | {server} | {rps:,.0f} | {med(rs,'p50_ms'):.2f} ms | {med(rs,'p99_ms'):.2f} ms | {rps/base:.2f} |")
    two_panel_bars("stack-probe.png", [(f"{k}: one core, wrk -c50 on the other", plot[k]) for k in ("hello", "proxy")],
                   ["#888", "#3a7", "#c84", "#e96"])

def two_panel_bars(filename, panels, colors):
    """Two bar charts of requests/s side by side: panels are (title, {server: rps})."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)", file=sys.stderr)
        return
    os.makedirs(IMG, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (title, values) in zip(axes, panels):
        servers = list(values)
        ax.bar(servers, [values[s] for s in servers], color=colors[: len(servers)])
        ax.set_title(title)
        ax.set_ylabel("requests/s")
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(IMG, filename), dpi=110)

if __name__ == "__main__":
    inprocess()
    http()
    stack_probe()
