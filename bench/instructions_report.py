#!/usr/bin/env python3
"""Table and plot of bench/instructions.sh's results.

Reads bench/results/instructions.jsonl (one line per case: instructions per
request on the server's worker thread, split per component), prints a
markdown table (thousands of instructions per request) and draws
docs/img/instructions.png, one stacked bar per case.
Usage: bench/instructions_report.py [RESULTS] [PLOT]
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    results = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "bench/results/instructions.jsonl")
    plot = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "docs/img/instructions.png")
    rows = [json.loads(line) for line in open(results) if line.strip()]
    parts = [p for p in rows[0]["components"] if any(r["components"][p] >= 50 for r in rows)]
    names = [r["name"] for r in rows]
    print("| part (k instructions per request) | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(rows))
    for part in parts:
        cells = [f"{r['components'][part] / 1000:.1f}" for r in rows]
        print(f"| {part} | " + " | ".join(cells) + " |")
    totals = [f"**{r['worker_per_request'] / 1000:.1f}**" for r in rows]
    print("| **all** | " + " | ".join(totals) + " |")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(13, 5.5))
    bottoms = [0.0] * len(rows)
    colors = plt.get_cmap("tab20").colors
    for i, part in enumerate(parts):
        values = [r["components"][part] / 1000 for r in rows]
        ax.bar(names, values, bottom=bottoms, label=part, color=colors[i % len(colors)])
        bottoms = [b + v for b, v in zip(bottoms, values)]
    for x, total in enumerate(bottoms):
        ax.text(x, total + 1, f"{total:.1f}k", ha="center", fontsize=8)
    ax.set_ylabel("thousand instructions per request (worker thread, user space)")
    ax.set_title("Instructions per request, counted by callgrind (bench/instructions.sh)")
    ax.tick_params(axis="x", rotation=30, labelsize=8)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(plot, dpi=110)
    print(f"\nplot: {plot}")


if __name__ == "__main__":
    main()
