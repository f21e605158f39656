#!/usr/bin/env python3
"""What tracing (and the access log with it) costs per request, from
bench/instructions.sh's results: issue 32's cases, a route with one Rust
filter proxied to nginx, with nothing on, the access log, tracing at 100 %
and 1 % sampling, and the log with 1 % tracing. Instructions per request on
the worker thread and on all threads (the log's writer, the span batcher,
the OTLP exporter), as a table and as docs/img/trace-cost.png.
Usage: bench/trace_report.py [RESULTS] [PLOT]
"""
import json
import os
import sys

from access_log_report import stacked_bars

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = "gateway proxy/rust"
CASES = [
    ("nothing on", BASE),
    ("access log", BASE + " +log"),
    ("tracing 100 %", BASE + " +trace100"),
    ("tracing 1 %", BASE + " +trace1"),
    ("access log + tracing 1 %", BASE + " +log+trace1"),
]


def main():
    results = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "bench/results/instructions.jsonl")
    plot = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "docs/img/trace-cost.png")
    rows = {r["name"]: r for r in (json.loads(line) for line in open(results) if line.strip())}
    cases = [(label, rows[name]) for label, name in CASES if name in rows]
    base = rows[BASE]["all_threads_per_request"]
    print("| one Rust filter, proxied | worker thread | all threads | over nothing on (all threads) |")
    print("|---|---|---|---|")
    for label, r in cases:
        extra = r["all_threads_per_request"] - base
        print(f"| {label} | {r['worker_per_request']:,.0f} | {r['all_threads_per_request']:,.0f} | "
              f"{extra:+,.0f} ({100 * extra / base:+.1f} %) |")

    stacked_bars(plot, [label for label, _ in cases],
                 [r["worker_per_request"] for _, r in cases],
                 [r["all_threads_per_request"] - r["worker_per_request"] for _, r in cases],
                 "other threads (log writer, span batcher, exporter)",
                 "Access log and tracing per request, one filter (callgrind, bench/instructions.sh)",
                 (9, 4.5), label_size=8)

if __name__ == "__main__":
    main()
