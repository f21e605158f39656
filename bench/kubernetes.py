#!/usr/bin/env python3
"""Kubernetes benchmark (issue 36, docs/benchmarks.md "Kubernetes"): one
`wasmgate run` node following a real kube-apiserver (the tests' one, built by
scripts/install-deps.sh), measured by the ignored test
crates/cli/tests/e2e/kubernetes_bench.rs, which this script runs and plots:

  - propagation: CHANGES HTTPRoutes created one after another, the time from
    the create call until the node serves each (p50/p99; target p99 < 500 ms);
  - lost requests: four clients on a steady route during those changes;
  - scale: memory and CPU of the node with ROUTES HTTPRoutes, and
    propagation again at that size.

Writes bench/results/kubernetes.json and docs/img/kubernetes.png.
Usage: bench/kubernetes.py [--changes 100] [--routes 1000]
Run it on a quiet machine (no build beside it).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# bench/http.py would shadow the standard library's http.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402

ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "bench", "results", "kubernetes.json")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--routes", type=int, default=1000)
    args = parser.parse_args()
    env = {**os.environ, "CHANGES": str(args.changes), "ROUTES": str(args.routes),
           "WASMGATE_BENCH_OUT": OUT}
    done = subprocess.run(["cargo", "test", "--release", "-p", "wasmgate-cli", "--test",
                           "e2e", "kubernetes_bench::", "--", "--ignored", "--nocapture"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(done.stdout[-4000:] + done.stderr[-4000:])
    with open(OUT) as f:
        result = json.load(f)
    small, scale = result["propagation"], result["scale"]
    large = scale["propagation"]
    print(f"propagation ({small['n']} changes): p50 {small['p50_ms']:.1f} ms, "
          f"p99 {small['p99_ms']:.1f} ms, max {small['max_ms']:.1f} ms")
    print(f"lost during the changes: {result['load']['lost']} of "
          f"{result['load']['ok'] + result['load']['lost']}")
    print(f"{scale['httproutes']} HTTPRoutes ({scale['routes_served']} routes): "
          f"RSS {scale['rss_mib_start']:.1f} -> {scale['rss_mib_at_scale']:.1f} MiB, "
          f"all served after {scale['seconds_until_all_served']:.2f} s "
          f"({scale['cpu_s_to_take_them']:.2f} s CPU), idle 10 s: {scale['cpu_s_idle_10s']:.2f} s CPU")
    print(f"propagation at that size ({large['n']} changes): p50 {large['p50_ms']:.1f} ms, "
          f"p99 {large['p99_ms']:.1f} ms; {scale['cpu_s_per_change_at_scale'] * 1000:.0f} ms CPU per change")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(8, 4))
    for data, label in [(small, f"{result['changes'] + 1} HTTPRoutes"),
                        (large, f"{scale['httproutes']} HTTPRoutes")]:
        values = sorted(data["all_ms"])
        ax.plot(values, [(i + 1) / len(values) for i in range(len(values))], label=label)
    ax.axvline(500, color="grey", linestyle="--", label="target p99 (500 ms)")
    ax.set_xlabel("HTTPRoute created -> node serves it (ms)")
    ax.set_ylabel("fraction of changes")
    ax.set_title("Kubernetes propagation, one node, real kube-apiserver")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(ROOT, "docs", "img", "kubernetes.png"), dpi=110)


if __name__ == "__main__":
    main()
