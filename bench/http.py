#!/usr/bin/env python3
"""HTTP benchmark: wasmgate serve vs the Go Fiber + Extism Go SDK reference
(mutex and pool) vs a native Rust handler on wasmgate's listener.

Every server is pinned to CPU 0 with one worker thread (GOMAXPROCS=1 for Go),
wrk to CPU 1. Variants are interleaved over several rounds in one run; the
table reports medians and ratios. Usage: bench/http.py [--rounds N] [--seconds S]
"""
import argparse, json, os, re, signal, socket, subprocess, sys, time

from procstat import cpu_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T = lambda *p: os.path.join(ROOT, "target", *p)
HELLO = T("wasm", "hello.wasm")

SERVERS = {
    "wasmgate": lambda port: [T("release", "wasmgate"), "serve", HELLO, "hello", "--port", str(port), "--threads", "1", "--log-level", "warn", "--access-log", "off"],
    "native": lambda port: [T("release", "examples", "native_hello"), str(port), "1"],
    "gofiber-pool": lambda port: [T("reference", "gofiber"), "-wasm", HELLO, "-mode", "pool", "-addr", f"127.0.0.1:{port}"],
    "gofiber-mutex": lambda port: [T("reference", "gofiber"), "-wasm", HELLO, "-mode", "mutex", "-addr", f"127.0.0.1:{port}"],
}

def wait_port(port, proc, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not start")

def parse_latency(text, label):
    m = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
    value, unit = float(m.group(1)), m.group(2)
    return value * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

def run_wrk(port, conns, seconds, pid=None):
    """req/s, latency and errors; with the server's `pid`, also its CPU time
    per request, which moves less between runs on this machine than req/s."""
    threads = 1 if conns == 1 else 2
    cpu_before = cpu_seconds(pid) if pid else None
    out = subprocess.run(["taskset", "-c", "1", "wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "--latency",
                          "-s", os.path.join(ROOT, "bench", "post-john-doe.lua"), f"http://127.0.0.1:{port}/"],
                         capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = sum(int(x) for x in re.findall(r"(?:Non-2xx or 3xx responses|Socket errors:.*?):?\s+(\d+)", out))
    result = {"rps": rps, "p50_ms": parse_latency(out, "50"), "p99_ms": parse_latency(out, "99"), "errors": errors}
    if pid:
        requests = int(re.search(r"(\d+) requests in", out).group(1))
        result["cpu_us_per_request"] = (cpu_seconds(pid) - cpu_before) / requests * 1e6
    return result

def peak_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1))

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "http.json"))
    args = ap.parse_args()
    results = []
    port = 18100
    for rnd in range(args.rounds):
        for name, cmd in SERVERS.items():
            port += 1
            env = dict(os.environ, GOMAXPROCS="1")
            proc = subprocess.Popen(["taskset", "-c", "0"] + cmd(port), env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                wait_port(port, proc)
                run_wrk(port, 10, 1)  # warm-up (instances, JIT-free but caches, connections)
                for conns in (1, 100):
                    r = run_wrk(port, conns, args.seconds, proc.pid)
                    r.update(server=name, conns=conns, round=rnd, peak_rss_kib=peak_rss_kib(proc.pid))
                    results.append(r)
                    print(json.dumps(r), flush=True)
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)

if __name__ == "__main__":
    main()
