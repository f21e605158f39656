#!/usr/bin/env python3
"""What loading a plugin from an OCI registry costs (issue 34; docs/benchmarks.md,
"Plugins from OCI registries"), side by side in one run, against loading the
same module from a file:

  file           `wasmgate call MODULE.wasm` (the baseline)
  oci-cold       `wasmgate call oci://…:tag`, nothing pulled before: the tag
                 resolved, manifest and layer downloaded, checked and stored
  oci-store      the same tag again (`pull: if_not_present`): from the store,
                 no registry
  oci-always     `--pull always`: the tag resolved at the registry (one HEAD),
                 the rest from the store
  oci-digest     `oci://…@sha256:…`, pulled before: from the store
  image-cold     Higress's image layout (plugin.tar.gz in the last layer),
                 nothing pulled before: the layer is also unpacked

Every case runs with the compile cache warm (its entries are copied into each
fresh cache directory), so what differs is the pull, not compilation. The
registry is CNCF distribution's (target/test-bin/registry, built by
scripts/install-deps.sh) on loopback, the images pushed by oras. Two modules:
the Rust `hello` (Extism PDK, small) and the Go `go_hello` (several MiB).
Per case: wall-clock and CPU time (user + system) of the whole `wasmgate call`,
medians of the rounds, cases rotating round by round.

Writes bench/results/oci_pull.json and docs/img/oci-pull.png, prints a
Markdown table. Usage: bench/oci_pull.py [--rounds 15]
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# bench/http.py would shadow the standard library's http (urllib needs it).
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import argparse  # noqa: E402
import glob
import json
import resource
import shutil
import socket
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(HERE)
WASMGATE = os.path.join(ROOT, "target/release/wasmgate")
REGISTRY = os.path.join(ROOT, "target/test-bin/registry")
ORAS = os.path.join(ROOT, "target/test-bin/oras")
MODULES = {"hello (Rust)": ("hello", "hello"), "go_hello (Go)": ("go_hello", "hello")}
CASES = ["file", "oci-cold", "oci-store", "oci-always", "oci-digest", "image-cold"]
RELOAD_CASES = ["file", "oci-if-not-present", "oci-always"]
PORT = 18531
GATEWAY_PORT, ADMIN_PORT = 18532, 18533


def run_timed(args, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run(args, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{out.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall * 1000, cpu * 1000


def oras_push(target, *files, cwd):
    out = subprocess.run([ORAS, "push", "--plain-http", "--disable-path-validation", "--format",
                          "go-template={{.digest}}", target, *files],
                         cwd=cwd, capture_output=True, text=True, env={**os.environ, "HOME": cwd})
    if out.returncode != 0:
        sys.exit(out.stderr)
    return out.stdout.strip()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    for path in (WASMGATE, REGISTRY, ORAS):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: cargo build --release; scripts/install-deps.sh")
    tmp = tempfile.mkdtemp(prefix="wasmgate-oci-bench.")
    with open(os.path.join(tmp, "config.yml"), "w") as f:
        f.write(f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {tmp}/data\n"
                f"http:\n  addr: 127.0.0.1:{PORT}\n")
    registry = subprocess.Popen([REGISTRY, "serve", "config.yml"], cwd=tmp, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env={**os.environ, "OTEL_TRACES_EXPORTER": "none"})
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", PORT), 0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        host = f"127.0.0.1:{PORT}"
        refs = {}
        for label, (name, _) in MODULES.items():
            module = os.path.join(ROOT, "target/wasm", f"{name}.wasm")
            work = os.path.join(tmp, name)
            os.makedirs(work)
            shutil.copy(module, os.path.join(work, "plugin.wasm"))
            digest = oras_push(f"{host}/bench/{name}:1", "--artifact-type", "application/vnd.wasm.config.v1+json",
                               "plugin.wasm:application/vnd.wasm.content.layer.v1+wasm", cwd=work)
            subprocess.run(["tar", "-czf", "plugin.tar.gz", "plugin.wasm"], cwd=work, check=True)
            oras_push(f"{host}/bench/{name}-image:1", "plugin.tar.gz:application/vnd.oci.image.layer.v1.tar+gzip",
                      cwd=work)
            refs[label] = {"module": module, "size": os.path.getsize(module),
                           "tag": f"oci://{host}/bench/{name}:1", "digest": f"oci://{host}/bench/{name}@{digest}",
                           "image": f"oci://{host}/bench/{name}-image:1"}
        # A compile cache holding both modules, copied into each fresh directory.
        warm = os.path.join(tmp, "warm")
        for label, (name, function) in MODULES.items():
            run_timed([WASMGATE, "call", refs[label]["module"], function, "--input", "x"],
                      {**os.environ, "WASMGATE_CACHE_DIR": warm})
        compiled = [f for f in glob.glob(os.path.join(warm, "*")) if os.path.isfile(f)]

        def fresh():
            d = tempfile.mkdtemp(dir=tmp)
            for f in compiled:
                shutil.copy2(f, d)
            os.chmod(d, 0o700)
            return d

        reloads = measure_reloads(refs["go_hello (Go)"], tmp, fresh(), args.rounds)
        runs = []
        for r in range(args.rounds):
            for label, (name, function) in MODULES.items():
                ref = refs[label]
                store = fresh()  # pulled into by oci-cold, read by the store cases
                order = CASES if r % 2 == 0 else CASES[::-1]
                # The store cases need oci-cold first; the order rotates the rest.
                order = ["oci-cold"] + [c for c in order if c != "oci-cold"]
                for case in order:
                    cache = fresh() if case in ("file", "image-cold") else store
                    target, extra = {
                        "file": (ref["module"], []),
                        "oci-cold": (ref["tag"], []),
                        "oci-store": (ref["tag"], []),
                        "oci-always": (ref["tag"], ["--pull", "always"]),
                        "oci-digest": (ref["digest"], []),
                        "image-cold": (ref["image"], []),
                    }[case]
                    wall, cpu = run_timed([WASMGATE, "call", target, function, "--input", "x", "--plain-http", *extra],
                                          {**os.environ, "WASMGATE_CACHE_DIR": cache, "RUST_LOG": "warn"})
                    runs.append({"round": r, "module": label, "case": case, "wall_ms": wall, "cpu_ms": cpu})
                    print(json.dumps(runs[-1]), file=sys.stderr)
    finally:
        registry.terminate()
        registry.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    summary = {m: {c: {k: statistics.median(x[k] for x in runs if x["module"] == m and x["case"] == c)
                       for k in ("wall_ms", "cpu_ms")} for c in CASES} for m in MODULES}
    reload_summary = {c: statistics.median(reloads[c]) for c in RELOAD_CASES}
    result = {"rounds": args.rounds, "sizes": {m: refs[m]["size"] for m in MODULES}, "runs": runs,
              "summary": summary, "reloads": reloads, "reload_summary": reload_summary}
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "oci_pull.json"), "w") as f:
        json.dump(result, f, indent=1)
    plot(result)
    print("| module | case | wall ms | vs file | CPU ms | vs file |")
    print("|---|---|---|---|---|---|")
    for m in MODULES:
        base = summary[m]["file"]
        for c in CASES:
            s = summary[m][c]
            print(f"| {m} ({result['sizes'][m] / 1048576:.1f} MiB) | {c} | {s['wall_ms']:.1f} | "
                  f"{s['wall_ms'] / base['wall_ms']:.2f}x | {s['cpu_ms']:.1f} | {s['cpu_ms'] / base['cpu_ms']:.2f}x |")
    print()
    print("| gateway reload (go_hello) | POST /reload ms | vs file |")
    print("|---|---|---|")
    for c in RELOAD_CASES:
        print(f"| {c} | {reload_summary[c]:.1f} | {reload_summary[c] / reload_summary['file']:.2f}x |")


def measure_reloads(ref, tmp, cache, rounds):
    """`POST /reload` of a gateway whose one plugin (an Extism function)
    is the Go module from a file, from the registry by tag with
    `if_not_present`, and with `always`: what a reload costs (each rebuilds
    the plugin from the compile cache; `always` also asks the registry)."""
    import urllib.request
    wasm = {"file": ref["module"], "oci-if-not-present": ref["tag"], "oci-always": ref["tag"]}
    times = {c: [] for c in RELOAD_CASES}
    for case in RELOAD_CASES:
        pull = "\n    pull: always" if case == "oci-always" else ""
        registry = "\n    registry: {plain_http: true}" if case != "file" else ""
        config = os.path.join(tmp, f"gw-{case}.yaml")
        with open(config, "w") as f:
            f.write(f"listen: 127.0.0.1:{GATEWAY_PORT}\nadmin: 127.0.0.1:{ADMIN_PORT}\nplugins:\n  - name: fn\n"
                    f"    wasm: {wasm[case]}{pull}{registry}\nroutes:\n"
                    f"  - {{name: fn, path: {{prefix: /fn/}}, function: {{plugin: fn}}}}\n")
        gw = subprocess.Popen([WASMGATE, "run", "-c", config, "--no-watch"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**os.environ, "WASMGATE_CACHE_DIR": cache})
        try:
            for _ in range(400):
                try:
                    socket.create_connection(("127.0.0.1", ADMIN_PORT), 0.1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            for i in range(rounds + 2):
                request = urllib.request.Request(f"http://127.0.0.1:{ADMIN_PORT}/reload", method="POST",
                                                 headers={"x-wasmgate-admin": "1"})
                started = time.perf_counter()
                urllib.request.urlopen(request).read()
                if i >= 2:  # the first two warm up
                    times[case].append((time.perf_counter() - started) * 1000)
        finally:
            gw.terminate()
            gw.wait()
    return times


def plot(result):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    width = 0.38
    x = list(range(len(CASES)))
    for ax, key, label in [(axes[0], "wall_ms", "wall-clock ms of `wasmgate call` (lower is better)"),
                           (axes[1], "cpu_ms", "CPU ms, user + system (lower is better)")]:
        for i, m in enumerate(MODULES):
            values = [result["summary"][m][c][key] for c in CASES]
            bars = ax.bar([p + (i - 0.5) * width for p in x], values, width, label=m)
            ax.bar_label(bars, fmt="%.0f", fontsize=7)
        ax.set_xticks(x, CASES, rotation=15, fontsize=8)
        ax.set_title(label, fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle(f"Loading a plugin from a file vs from a local OCI registry, compile cache warm "
                 f"(medians of {result['rounds']} rounds)")
    fig.tight_layout()
    fig.savefig(os.path.join(ROOT, "docs", "img", "oci-pull.png"), dpi=110)


if __name__ == "__main__":
    main()
