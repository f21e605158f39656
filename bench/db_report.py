#!/usr/bin/env python3
"""Markdown tables and plot for bench/db.sh: medians over rounds of
bench/results/db.json (the query endpoint's p50/p99 at c=1 and req/s at c=32
per variant and network, the ratios of issue 14's targets, PostgreSQL
connections opened, the Redis rate limit's cost) and docs/img/db.png."""
import json, os, statistics, sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
data = json.load(open(os.path.join(ROOT, "bench", "results", "db.json")))
runs = defaultdict(list)  # (bench, net, variant, conns) -> runs, one per round
for r in data["runs"]:
    runs[(r["bench"], r["net"], r["variant"], r["conns"])].append(r)


def med(net, v, c, k, bench="db"):
    return statistics.median(r[k] for r in runs[(bench, net, v, c)])


def paired(net, num, den, c, k, bench="db"):
    """Median over rounds of num/den, each round's pair measured back to back."""
    d = {r["round"]: r[k] for r in runs[(bench, net, den, c)]}
    return statistics.median(r[k] / d[r["round"]] for r in runs[(bench, net, num, c)])


VARIANTS = {
    "plugin-pool": "(a) plugin, host pool",
    "plugin-nopool": "(b) plugin, a connection per request",
    "native": "(c) native Rust handler, same pool",
    "go-pgx": "(d) Go Fiber + pgx pool",
}
rtt = data["rtt_ms"]
NETS = {"loopback": "loopback", "rtt": f"{rtt} ms RTT"}
ms = lambda us: f"{us / 1000:.2f} ms" if us < 100_000 else f"{us / 1000:.0f} ms"
m = data["measured_rtt_ms"]
print(f"{data['rounds']} rounds x {data['seconds']} s, medians over rounds; PostgreSQL {data['postgres']} "
      f"({data['tls']}, SCRAM-SHA-256); round trip measured (Redis PING): {m['loopback']} ms direct, "
      f"{m['proxied']} ms through Toxiproxy "
      f"(load average before/after: {data['loadavg_before']} / {data['loadavg_after']})\n")

print("| network | variant | p50, c=1 | p99, c=1 | req/s, c=32 | p50, c=32 | p99, c=32 | errors |")
print("|---|---|---|---|---|---|---|---|")
for net, nlabel in NETS.items():
    for v, label in VARIANTS.items():
        if ("db", net, v, 1) not in runs:
            continue
        errors = sum(r["errors"] for c in (1, 32) for r in runs[("db", net, v, c)])
        print(f"| {nlabel} | {label} | {ms(med(net, v, 1, 'p50_us'))} | {ms(med(net, v, 1, 'p99_us'))} | "
              f"{med(net, v, 32, 'rps'):,.0f} | {ms(med(net, v, 32, 'p50_us'))} | {ms(med(net, v, 32, 'p99_us'))} | {errors} |")

print("\nRatios (median over rounds of each round's ratio; ratio of the medians in brackets):\n")
print("| network | p50 c=1: (a) / (c) | p50 c=1: (b) / (a) | req/s c=32: (a) / (c) | req/s c=32: (a) / (b) | p50 c=1: (a) / (d) | req/s c=32: (a) / (d) |")
print("|---|---|---|---|---|---|---|")
for net, nlabel in NETS.items():
    cells = []
    for num, den, c, k in [("plugin-pool", "native", 1, "p50_us"), ("plugin-nopool", "plugin-pool", 1, "p50_us"),
                           ("plugin-pool", "native", 32, "rps"), ("plugin-pool", "plugin-nopool", 32, "rps"),
                           ("plugin-pool", "go-pgx", 1, "p50_us"), ("plugin-pool", "go-pgx", 32, "rps")]:
        if ("db", net, den, c) not in runs:
            cells.append("-")
            continue
        cells.append(f"{paired(net, num, den, c, k):.2f}x ({med(net, num, c, k) / med(net, den, c, k):.2f}x)")
    print(f"| {nlabel} | " + " | ".join(cells) + " |")

ok = lambda b: "**met**" if b else "**missed**"
print("\nTargets:")
for net, nlabel in NETS.items():
    r = paired(net, "plugin-pool", "native", 1, "p50_us")
    print(f"- {nlabel}: (a) p50 within 1.3x of (c): {r:.2f}x - {ok(r <= 1.3)}")
r = paired("rtt", "plugin-nopool", "plugin-pool", 1, "p50_us")
print(f"- {NETS['rtt']}: (a) at least 6x faster than (b): {r:.2f}x - {ok(r >= 6)}")

print("\nPostgreSQL connections opened (log_connections) during the timed runs, all rounds; "
      "connections open right after the c=32 run (median):\n")
print("| network | variant | c=1: opened / requests | c=32: opened / requests | open after c=32 |")
print("|---|---|---|---|---|")
for net, nlabel in NETS.items():
    for v, label in VARIANTS.items():
        if ("db", net, v, 1) not in runs:
            continue
        cell = lambda c: "{:,} / {:,}".format(sum(r["pg_connections"] for r in runs[("db", net, v, c)]),
                                             sum(r["requests"] for r in runs[("db", net, v, c)]))
        print(f"| {nlabel} | {label} | {cell(1)} | {cell(32)} | {med(net, v, 32, 'pg_backends'):.0f} |")

RL = {"plain": ("loopback", "`respond` route, no filter"),
      "limited": ("loopback", "with the Redis rate limit (Redis on loopback)"),
      "limited-rtt": ("rtt", f"with the Redis rate limit (Redis at {rtt} ms RTT)")}
if ("ratelimit", "loopback", "plain", 32) in runs:
    print("\nRedis rate limit (Higress wasm-go filter, one EVAL per request):\n")
    print("| route | req/s, c=32 | vs no filter | p50, c=1 | added p50, c=1 | p99, c=1 | p99, c=32 | errors |")
    print("|---|---|---|---|---|---|---|---|")
    base = {r["round"]: r["p50_us"] for r in runs[("ratelimit", "loopback", "plain", 1)]}
    base_rps = {r["round"]: r["rps"] for r in runs[("ratelimit", "loopback", "plain", 32)]}
    for s, (net, label) in RL.items():
        k1, k32 = ("ratelimit", net, s, 1), ("ratelimit", net, s, 32)
        rps = statistics.median(r["rps"] for r in runs[k32])
        vs = statistics.median(r["rps"] / base_rps[r["round"]] for r in runs[k32])
        added = statistics.median(r["p50_us"] - base[r["round"]] for r in runs[k1])
        errors = sum(r["errors"] for r in runs[k1] + runs[k32])
        p = lambda k, key: statistics.median(r[key] for r in runs[k])
        print(f"| {label} | {rps:,.0f} | {vs:.2f} | {p(k1, 'p50_us'):,.0f} µs | "
              f"{'-' if s == 'plain' else f'+{added:,.0f} µs'} | {p(k1, 'p99_us'):,.0f} µs | {p(k32, 'p99_us'):,.0f} µs | {errors} |")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    fig, axes = plt.subplots(2, 2, figsize=(11, 6.5))
    colors = ["#3a7", "#c44", "#44c", "#999"]
    for col, (net, nlabel) in enumerate(NETS.items()):
        vs = [v for v in VARIANTS if ("db", net, v, 1) in runs]
        short = {"plugin-pool": "(a) plugin\nhost pool", "plugin-nopool": "(b) plugin\nno pool",
                 "native": "(c) native\nsame pool", "go-pgx": "(d) Go + pgx\npool"}
        labels = [short[v] for v in vs]
        ax = axes[0][col]
        p50 = [med(net, v, 1, "p50_us") / 1000 for v in vs]
        p99 = [med(net, v, 1, "p99_us") / 1000 for v in vs]
        x = range(len(vs))
        ax.bar([i - 0.2 for i in x], p50, 0.4, color=colors[: len(vs)], label="p50")
        ax.bar([i + 0.2 for i in x], p99, 0.4, color=colors[: len(vs)], alpha=0.45, label="p99")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:g}"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xticks(list(x), labels, fontsize=8)
        ax.set_ylabel("ms (log scale, lower is better)")
        ax.set_title(f"{nlabel}: latency at c=1 (p50 solid, p99 light)", fontsize=9)
        for i, v in enumerate(p50):
            ax.annotate(f"{v:.2f}", (i - 0.2, v), ha="center", va="bottom", fontsize=7)
        ax = axes[1][col]
        rps = [med(net, v, 32, "rps") for v in vs]
        ax.bar(list(x), rps, 0.6, color=colors[: len(vs)])
        ax.set_xticks(list(x), labels, fontsize=8)
        ax.set_ylabel("req/s (higher is better)")
        ax.set_title(f"{nlabel}: throughput at c=32", fontsize=9)
        for i, v in enumerate(rps):
            ax.annotate(f"{v:,.0f}", (i, v), ha="center", va="bottom", fontsize=7)
    fig.suptitle("One query on an empty PostgreSQL table (TLS + SCRAM), server on 1 core", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.join(ROOT, "docs", "img"), exist_ok=True)
    fig.savefig(os.path.join(ROOT, "docs", "img", "db.png"), dpi=110)
except ImportError:
    print("(matplotlib not installed: no plot)", file=sys.stderr)
