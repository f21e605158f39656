#!/usr/bin/env python3
"""What an idle gateway costs: CPU time per thread over a quiet period.

A gateway with one Rust filter on a local answer gets one request, then
nothing; each of its threads' CPU time (user + system, /proc/<pid>/task/*/stat,
10 ms resolution) is read before and after `--seconds` of quiet. Each binary
given is measured `--runs` times, alternating. docs/benchmarks.md, "Idle".

Usage: bench/idle_cpu.py [--runs 3] [--seconds 10] [--plot docs/img/idle-cpu.png]
                         NAME=BINARY [NAME=BINARY ...]
(default: now=target/release/wasmgate). Writes bench/results/idle_cpu.json.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
from procstat import wait_port  # noqa: E402 (from this folder, before it leaves sys.path)
# bench/ holds folders named like standard modules (http): not on the path.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORT, ADMIN = 18911, 18912
TICKS = os.sysconf("SC_CLK_TCK")


def threads_cpu(pid):
    """Each thread's CPU seconds, by name (same-named threads summed)."""
    cpu = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime and stime are fields 14 and 15 of stat; 12 and 13 after the name.
        cpu[name] = cpu.get(name, 0) + (int(fields[11]) + int(fields[12])) / TICKS
    return cpu


def measure(binary, seconds, tmp):
    config = os.path.join(tmp, "idle.yaml")
    with open(config, "w") as f:
        f.write(f"""listen: 127.0.0.1:{PORT}
admin: 127.0.0.1:{ADMIN}
access_log: {{path: {tmp}/access.log}}
plugins:
  - {{name: tag, wasm: {ROOT}/target/wasm/add_header.wasm}}
routes:
  - {{name: a, path: {{prefix: /}}, plugins: [{{plugin: tag}}], respond: {{status: 200, body: ok}}}}
""")
    gateway = subprocess.Popen([binary, "run", "-c", config],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(PORT, gateway)
        # One request, so that the filter has run once; then quiet.
        urllib.request.urlopen(f"http://127.0.0.1:{PORT}/", timeout=5).read()
        time.sleep(1)
        before = threads_cpu(gateway.pid)
        time.sleep(seconds)
        after = threads_cpu(gateway.pid)
    finally:
        gateway.terminate()
        gateway.wait(10)
    # The main thread carries the process's name (the binary's, cut to 15).
    main = os.path.basename(binary)[:15]
    per_thread = {("main" if name == main else name):
                  round((after[name] - before.get(name, 0)) / seconds * 1000, 2)
                  for name in after}
    return {"total": round(sum(per_thread.values()), 2),
            "threads": {k: v for k, v in per_thread.items() if v > 0}}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binaries", nargs="*")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--plot")
    args = parser.parse_args()
    binaries = dict(b.split("=", 1) for b in args.binaries) or {
        "now": os.path.join(ROOT, "target/release/wasmgate")}
    results = {name: [] for name in binaries}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for name, binary in binaries.items():
                result = measure(binary, args.seconds, tmp)
                results[name].append(result)
                print(f"run {run + 1}: {name}: {result['total']} ms of CPU a second {result['threads']}",
                      flush=True)
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench/results/idle_cpu.json"), "w") as f:
        json.dump(results, f, indent=1)
    print("| binary | CPU per second idle, each run |")
    print("|---|---|")
    for name, runs in results.items():
        totals = ", ".join(f"{r['total']} ms" for r in runs)
        print(f"| {name} | {totals} |")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        names = list(results)
        threads = sorted({t for runs in results.values() for r in runs for t in r["threads"]})
        fig, ax = plt.subplots(figsize=(6, 3.2))
        bottom = [0.0] * len(names)
        for thread in threads:
            heights = [sorted(r["threads"].get(thread, 0) for r in results[n])[len(results[n]) // 2]
                       for n in names]
            ax.bar(names, heights, bottom=bottom, label=thread)
            bottom = [b + h for b, h in zip(bottom, heights)]
        ax.set_ylabel("ms of CPU per second, idle")
        ax.set_title("An idle gateway's CPU by thread (median run)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
