#!/usr/bin/env python3
"""Issue 57's design step as one picture: instructions per proxied request of
each design (bench/stack-probe/instructions.sh) against nginx's, with the
issue's target (1.25x nginx), and req/s against nginx from one run of
`run.py --only proxy`.
Usage: bench/stack-probe/report.py [DESIGN_JSONL] [PROXY_JSON] [PNG]"""
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

design = sys.argv[1] if len(sys.argv) > 1 else "bench/results/design.jsonl"
proxy = sys.argv[2] if len(sys.argv) > 2 else "bench/results/stack-probe-proxy.json"
png = sys.argv[3] if len(sys.argv) > 3 else "docs/img/design-step.png"

# instructions.sh's names -> run.py's server names
NAMES = {"nginx proxy": "nginx", "wasmgate proxy": "wasmgate", "hyper-conn-proxy": "hyper-conn",
         "hyper-proxy": "hyper", "lean-proxy": "lean", "pingora proxy": "pingora-tuned"}
LABELS = {"nginx": "nginx", "wasmgate": "wasmgate\n(today)", "hyper-conn": "hyper +\nclient conn",
          "hyper": "hyper +\npooled client", "lean": "lean HTTP/1\n(httparse)", "pingora-tuned": "Pingora 0.9\n(1 thread)"}
counts = {}
for line in open(design):
    row = json.loads(line)
    counts[NAMES[row["name"]]] = row["worker_per_request"]
runs = json.load(open(proxy))
rps = {s: statistics.median(r["rps"] for r in runs if r["server"] == s) for s in {r["server"] for r in runs}}
order = [s for s in LABELS if s in counts]
fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
bars = left.bar([LABELS[s] for s in order], [counts[s] for s in order],
                color=["#888" if s == "nginx" else "#c44" if s == "wasmgate" else "#48c" for s in order])
left.axhline(counts["nginx"] * 1.25, color="green", linestyle="--", label="target: 1.25x nginx")
left.bar_label(bars, labels=[f"{counts[s]:,.0f}\n{counts[s] / counts['nginx']:.2f}x" for s in order], fontsize=8)
left.set_ylabel("instructions per proxied request (callgrind)")
left.set_ylim(0, max(counts.values()) * 1.2)
left.legend(fontsize=8)
left.tick_params(axis="x", labelsize=8)
ratios = [rps[s] / rps["nginx"] for s in order if s in rps]
bars = right.bar([LABELS[s] for s in order if s in rps], ratios,
                 color=["#888" if s == "nginx" else "#c44" if s == "wasmgate" else "#48c" for s in order if s in rps])
right.axhline(1.0, color="green", linestyle="--", label="target: 1.0x nginx")
right.bar_label(bars, labels=[f"{r:.2f}" for r in ratios], fontsize=8)
right.set_ylabel("req/s against nginx (wrk -c50, one run)")
right.legend(fontsize=8)
right.tick_params(axis="x", labelsize=8)
fig.suptitle("Issue 57: the proxy designs measured beside nginx (one worker, keep-alive, small GET)")
fig.tight_layout()
fig.savefig(png, dpi=110)
print(f"wrote {png}")
