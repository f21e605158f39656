#!/usr/bin/env python3
"""Draws docs/img/r3b.png from reliability/results/r3b.json (R3b: a 6.25 MiB
echo alone and under saturating small requests, per binary and case)."""
import json, os, sys

REL = os.path.dirname(os.path.abspath(__file__))
rows = [json.loads(l) for l in open(os.path.join(REL, "results", "r3b.json")) if l.strip()]
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("matplotlib is needed: pip install matplotlib")
labels = [f"{r['binary']}\n({r['case']}) {'1 CPU' if r['case'] == 'a' else '2 CPUs'}" for r in rows]
x = range(len(rows))
fig, ax = plt.subplots(figsize=(9, 4))
ax.bar([i - 0.2 for i in x], [r["alone_s"] * 1000 for r in rows], 0.4, label="alone", color="#7a7")
ax.bar([i + 0.2 for i in x], [r["loaded_s"] * 1000 for r in rows], 0.4, label="under wrk -c32 small requests", color="#c75")
for i, r in enumerate(rows):
    ax.text(i + 0.2, r["loaded_s"] * 1000, f"x{r['loaded_s'] / r['alone_s']:.1f}", ha="center", va="bottom", fontsize=8)
ax.set_yscale("log")
ax.set_ylabel("6.25 MiB echo, median ms (log)")
ax.set_xticks(list(x))
ax.set_xticklabels(labels, fontsize=7)
ax.set_title("R3b: a legitimate long call under load (lower is better; pass: loaded <= 4x alone)")
ax.legend(fontsize=8)
fig.tight_layout()
out = os.path.join(os.path.dirname(REL), "docs", "img", "r3b.png")
fig.savefig(out, dpi=110)
print(f"wrote {out}")
