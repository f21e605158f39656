#!/usr/bin/env python3
"""Markdown table and plot for bench/gateway.sh: medians over rounds of
bench/results/gateway.json, ratios against the no-filter route and nginx (by
req/s, and by the CPU time per request of the server and its upstream, which
share CPU 0), the p50 latency each filter adds, issue 15's targets, and
docs/img/gateway.png."""
import json, os, statistics, sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
data = json.load(open(os.path.join(ROOT, "bench", "results", "gateway.json")))
runs = defaultdict(list)  # (scenario, conns) -> runs, one per round
for r in data["runs"]:
    runs[(r["scenario"], r["conns"])].append(r)
med = lambda s, c, k: statistics.median(r[k] for r in runs[(s, c)])

LABELS = {
    "upstream": "upstream direct (nginx)", "nginx": "nginx reverse proxy",
    "none": "wasmgate, no filter", "rust": "wasmgate, 1 Rust filter", "go": "wasmgate, 1 Go filter",
    "chain3": "wasmgate, chain of 3 (Rust, Go, Rust)",
    "fault-wasm": "local answer: wasm fault_injection", "fault-native": "local answer: `respond` (no wasm)",
}
conns = max(c for _, c in runs)  # the throughput runs; the -c1 runs measure latency
none, nginx = med("none", conns, "rps"), med("nginx", conns, "rps")

print(f"wrk -t1 -c{conns}, {data['rounds']} rounds x {data['seconds']} s, medians over rounds "
      f"(load average before/after: {data['loadavg_before']} / {data['loadavg_after']})\n")
# CPU time per request on CPU 0: the server's own and its upstream's (runs
# before CPU time was recorded have none).
has_cpu = all("cpu_us" in r for r in data["runs"])
core0 = lambda s: med(s, conns, "cpu_us") + med(s, conns, "upstream_cpu_us")
print("| scenario | req/s | vs no filter | vs nginx proxy | p50 | p99 | errors | CPU per request: server + upstream | vs no filter, by CPU | vs nginx proxy, by CPU |")
print("|---|---|---|---|---|---|---|---|---|---|")
bars = []
for s, label in LABELS.items():
    if (s, conns) not in runs:
        continue
    rps = med(s, conns, "rps")
    bars.append((label, rps))
    errors = sum(r["errors"] for r in runs[(s, conns)])
    cpu = (f"{med(s, conns, 'cpu_us'):.2f} + {med(s, conns, 'upstream_cpu_us'):.2f} µs | "
           f"{core0('none') / core0(s):.2f} | {core0('nginx') / core0(s):.2f} |") if has_cpu else "- | - | - |"
    print(f"| {label} | {rps:,.0f} | {rps / none:.2f} | {rps / nginx:.2f} | "
          f"{med(s, conns, 'p50_us'):,.0f} µs | {med(s, conns, 'p99_us'):,.0f} µs | {errors} | {cpu}")

# Added latency: -c1 runs, paired by round (interleaved, so each pair saw the same noise).
def added(s, n):
    by_round = {r["round"]: r["p50_us"] for r in runs[("none", 1)]}
    return statistics.median((r["p50_us"] - by_round[r["round"]]) / n for r in runs[(s, 1)])

print(f"\nLatency at -c1 (p50): no filter {med('none', 1, 'p50_us'):.0f} µs, "
      f"1 Rust filter {med('rust', 1, 'p50_us'):.0f} µs, chain of 3 {med('chain3', 1, 'p50_us'):.0f} µs.")
per_rust, per_chain = added("rust", 1), added("chain3", 3)
ok = lambda b: "**met**" if b else "**missed**"
print("\nIssue 15's targets (req/s ratios; by CPU per request in parentheses):")
for s, what, target in (("rust", "one Rust header filter vs no filter", 0.90),
                        ("go", "one Go header filter vs no filter", 0.85),
                        ("chain3", "chain of three vs no filter", 0.75)):
    ratio = med(s, conns, "rps") / none
    by_cpu = f" ({core0('none') / core0(s):.2f})" if has_cpu else ""
    print(f"- {what} >= {target:.2f}: {ratio:.2f}{by_cpu} - {ok(ratio >= target)}")
by_cpu = f" ({core0('nginx') / core0('none'):.2f})" if has_cpu else ""
print(f"- no filter vs nginx proxy >= 1.00: {none / nginx:.2f}{by_cpu} - {ok(none >= nginx)}")
print(f"- added p50 per filter at c=1 <= 5 µs, one Rust filter: {per_rust:.0f} µs (median of the rounds' differences) - {ok(per_rust <= 5)}")
print(f"- the same per filter of the chain of three (one of them Go): {per_chain:.0f} µs - {ok(per_chain <= 5)}")
local = med("fault-wasm", conns, "rps") / med("fault-native", conns, "rps")
by_cpu = f" ({med('fault-native', conns, 'cpu_us') / med('fault-wasm', conns, 'cpu_us'):.2f})" if has_cpu else ""
print(f"- wasm local answer vs `respond` >= 0.90: {local:.2f}{by_cpu} - {ok(local >= 0.9)}")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(10, 4.5))
    ax.barh([b[0] for b in bars][::-1], [b[1] for b in bars][::-1], color="#3a7")
    ax.axvline(nginx, color="#c44", lw=1, ls="--", label="nginx reverse proxy")
    ax.axvline(none, color="#44c", lw=1, ls=":", label="wasmgate, no filter")
    ax.set_xlabel(f"median req/s (wrk -c{conns}, higher is better)")
    ax.set_title("Gateway: proxy and filter throughput, servers on 1 core")
    ax.legend(fontsize=8, loc="center right")
    fig.tight_layout()
    os.makedirs(os.path.join(ROOT, "docs", "img"), exist_ok=True)
    fig.savefig(os.path.join(ROOT, "docs", "img", "gateway.png"), dpi=110)
except ImportError:
    print("(matplotlib not installed: no plot)", file=sys.stderr)
