#!/usr/bin/env python3
"""What the access log costs per request, from bench/instructions.sh's results.

Pairs every case with its `+log` twin (the same path with the access log on,
JSON lines to a file) and shows instructions per request on the worker
thread and on the other threads (the log's writer; nginx writes on its
worker), off and on, as a table and as docs/img/access-log-cost.png.
Usage: bench/access_log_report.py [RESULTS] [PLOT]
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    results = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "bench/results/instructions.jsonl")
    plot = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "docs/img/access-log-cost.png")
    rows = {r["name"]: r for r in (json.loads(line) for line in open(results) if line.strip())}
    pairs = [(name, rows[name], rows[name + " +log"]) for name in rows if name + " +log" in rows]
    print("| case | log off: worker / all threads | log on: worker / all threads | cost of a line (all threads) |")
    print("|---|---|---|---|")
    for name, off, on in pairs:
        cost = on["all_threads_per_request"] - off["all_threads_per_request"]
        print(f"| {name} | {off['worker_per_request']:,.0f} / {off['all_threads_per_request']:,.0f} | "
              f"{on['worker_per_request']:,.0f} / {on['all_threads_per_request']:,.0f} | "
              f"+{cost:,.0f} (+{100 * cost / off['all_threads_per_request']:.1f} %) |")

    labels, worker, other = [], [], []
    for name, off, on in pairs:
        for tag, r in (("off", off), ("log on", on)):
            labels.append(name.replace("gateway ", "gateway\n") + "\n" + tag)
            worker.append(r["worker_per_request"])
            other.append(r["all_threads_per_request"] - r["worker_per_request"])
    stacked_bars(plot, labels, worker, other, "other threads (the log's writer)",
                 "The access log's cost per request (callgrind, bench/instructions.sh)", (10, 4.8))


def stacked_bars(plot, labels, worker, other, other_label, title, size, label_size=7):
    """Instructions per request as bars, the worker's below the other threads'."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    worker = [w / 1000 for w in worker]
    other = [o / 1000 for o in other]
    fig, ax = plt.subplots(figsize=size)
    ax.bar(labels, worker, label="worker thread", color="#2563eb")
    ax.bar(labels, other, bottom=worker, label=other_label, color="#d97706")
    for x, (w, o) in enumerate(zip(worker, other)):
        ax.text(x, w + o + 1, f"{w + o:.1f}k", ha="center", fontsize=8)
    ax.set_ylabel("thousand instructions per request")
    ax.set_title(title)
    ax.tick_params(axis="x", labelsize=label_size)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plot, dpi=110)
    print(f"\nplot: {plot}")

if __name__ == "__main__":
    main()
