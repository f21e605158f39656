#!/usr/bin/env python3
"""Instructions per request before and after a change of the data plane, from
two runs of bench/instructions.sh (or instructions.py --json) on the two
binaries: a table on stdout and a bar chart. nginx's proxy, when either run
counted it, is drawn as a line (or NGINX=N, nginx's count from a run of
bench/instructions.sh in the same session, when neither file has it).
Usage: [NGINX=N] bench/step_report.py BEFORE.jsonl AFTER.jsonl OUT.png [TITLE]"""
import json
import os
import sys


def counts(path):
    """Worker instructions per request by case name (the last count wins)."""
    found = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                run = json.loads(line)
                found[run["name"]] = run["worker_per_request"]
    return found


def main():
    before, after = counts(sys.argv[1]), counts(sys.argv[2])
    out = sys.argv[3]
    title = sys.argv[4] if len(sys.argv) > 4 else "instructions per request, before and after"
    nginx = after.get("nginx proxy") or before.get("nginx proxy") or float(os.environ.get("NGINX", 0))
    cases = [c for c in before if c in after and not c.startswith("nginx")]
    print("| case | before | after | change |")
    print("|---|---|---|---|")
    for case in cases:
        b, a = before[case], after[case]
        print(f"| {case} | {b:,.0f} | {a:,.0f} | {100 * (a - b) / b:+.1f} % |")
    if nginx:
        print(f"| nginx proxy | | {nginx:,.0f} | |")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5))
    xs = range(len(cases))
    ax.bar([x - 0.2 for x in xs], [before[c] for c in cases], 0.4, label="before")
    ax.bar([x + 0.2 for x in xs], [after[c] for c in cases], 0.4, label="after")
    if nginx:
        ax.axhline(nginx, color="grey", linestyle="--", label=f"nginx proxy ({nginx:,.0f})")
        ax.axhline(1.25 * nginx, color="grey", linestyle=":", label="1.25x nginx (issue 57's target)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([c.replace("gateway ", "") for c in cases], rotation=20, ha="right")
    ax.set_ylabel("instructions per request (callgrind, worker thread)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


main()
