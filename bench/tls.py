#!/usr/bin/env python3
"""TLS against nginx, side by side in one run (issue 30; docs/benchmarks.md,
"TLS (issue 30)"), with the same certificates:

  handshake-ecdsa  full handshakes, a new connection per request, ECDSA P-256
  handshake-rsa    the same with RSA 2048
                   (`openssl s_time -new -www /`: it never resumes a session;
                   wrk would, and so would measure resumption)
  https            keep-alive HTTPS requests (wrk -c32), a local answer
  http             the same over plain HTTP: the TLS listener's cost per
                   request is the difference of the two
  proxy-https      HTTPS in, plain HTTP to an upstream (an nginx of its own)
  proxy-http       the same with plain HTTP in

Both servers: one process, one worker, pinned to CPU 0 with the upstream; the
load generator on CPU 1. TLS 1.3 (both servers' default with these clients),
X25519, session cache and tickets on in both. Scenarios rotate round by round
so machine noise meets all of them alike. Beside req/s, CPU time per request
(or per handshake) of the server from /proc, the steadier measure here.

Writes bench/results/tls.json and docs/img/tls.png, prints a Markdown table.
Usage: bench/tls.py [--rounds 3] [--seconds 5]
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
from procstat import cpu_seconds, start_nginx, wait_port  # noqa: E402 (from this folder, before it leaves sys.path)
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import argparse
import json
import re
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(HERE)
WASMGATE = os.path.join(ROOT, "target/release/wasmgate")
UP, NGINX_ECDSA, NGINX_RSA, NGINX_PLAIN = 18461, 18462, 18463, 18464
GW_ECDSA, GW_RSA, GW_PLAIN, GW_ADMIN = 18465, 18466, 18467, 18468
SERVERS = ["nginx", "wasmgate"]
SCENARIOS = ["handshake-ecdsa", "handshake-rsa", "https", "http", "proxy-https", "proxy-http"]


def make_certificates(tmp):
    """An ECDSA P-256 and an RSA 2048 certificate for `bench.example`."""
    for kind, key in [("ecdsa", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]),
                      ("rsa", ["-newkey", "rsa:2048"])]:
        subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", "2", *key,
                        "-subj", "/CN=bench.example",
                        "-addext", "subjectAltName=DNS:bench.example",
                        "-keyout", f"{tmp}/{kind}.key", "-out", f"{tmp}/{kind}.pem"],
                       check=True, capture_output=True)


def nginx(tmp, name, server_blocks):
    return start_nginx(f"{tmp}/{name}", f"""
  upstream up {{ server 127.0.0.1:{UP}; keepalive 64; keepalive_requests 1000000; }}
  ssl_protocols TLSv1.2 TLSv1.3;
  ssl_session_cache shared:SSL:10m; ssl_session_tickets on;
  {server_blocks}""")


def start(tmp):
    processes = {}
    processes["upstream"] = nginx(tmp, "upstream",
                                  f'server {{ listen 127.0.0.1:{UP}; location / {{ return 200 "hello from upstream\\n"; }} }}')
    wait_port(UP, processes["upstream"])
    locations = """location / { return 200 "hello world\\n"; }
      location /proxy { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }"""
    processes["nginx"] = nginx(tmp, "nginx", f"""
    server {{ listen 127.0.0.1:{NGINX_ECDSA} ssl; ssl_certificate {tmp}/ecdsa.pem; ssl_certificate_key {tmp}/ecdsa.key; {locations} }}
    server {{ listen 127.0.0.1:{NGINX_RSA} ssl; ssl_certificate {tmp}/rsa.pem; ssl_certificate_key {tmp}/rsa.key; {locations} }}
    server {{ listen 127.0.0.1:{NGINX_PLAIN}; {locations} }}""")
    for port in (NGINX_ECDSA, NGINX_RSA, NGINX_PLAIN):
        wait_port(port, processes["nginx"])
    config = f"{tmp}/wasmgate.yaml"
    with open(config, "w") as f:
        f.write(f"""listen: 127.0.0.1:{GW_PLAIN}
admin: 127.0.0.1:{GW_ADMIN}
access_log: {{enabled: false}}
listeners:
  - {{address: 127.0.0.1:{GW_ECDSA}, tls: {{certificates: [ecdsa]}}}}
  - {{address: 127.0.0.1:{GW_RSA}, tls: {{certificates: [rsa]}}}}
certificates:
  - {{name: ecdsa, cert: {tmp}/ecdsa.pem, key: {tmp}/ecdsa.key}}
  - {{name: rsa, cert: {tmp}/rsa.pem, key: {tmp}/rsa.key}}
limits: {{threads: 1}}
upstreams:
  - {{name: up, nodes: [{{address: 127.0.0.1:{UP}}}]}}
routes:
  - {{name: proxy, path: {{prefix: /proxy}}, upstream: up}}
  - {{name: local, respond: {{status: 200, body: "hello world\\n"}}}}
""")
    processes["wasmgate"] = subprocess.Popen(
        ["taskset", "-c", "0", WASMGATE, "run", "-c", config, "--no-watch", "--log-level", "warn"])
    for port in (GW_ECDSA, GW_RSA, GW_PLAIN):
        wait_port(port, processes["wasmgate"])
    return processes


def target(server, scenario):
    """(port, path, TLS?) of a scenario on a server."""
    ports = {"nginx": (NGINX_ECDSA, NGINX_RSA, NGINX_PLAIN),
             "wasmgate": (GW_ECDSA, GW_RSA, GW_PLAIN)}[server]
    return {
        "handshake-ecdsa": (ports[0], "/", True),
        "handshake-rsa": (ports[1], "/", True),
        "https": (ports[0], "/", True),
        "http": (ports[2], "/", False),
        "proxy-https": (ports[0], "/proxy", True),
        "proxy-http": (ports[2], "/proxy", False),
    }[scenario]


def check(server, scenario):
    """A wrong answer would be fast: the body each scenario must get."""
    port, path, tls = target(server, scenario)
    want = "hello from upstream" if path == "/proxy" else "hello world"
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}{path}"
    body = subprocess.run(["curl", "-sfk", url], capture_output=True, text=True).stdout
    if not body.startswith(want):
        sys.exit(f"{server} {scenario}: {url} answered {body!r}")


def measure(server, scenario, seconds, pid):
    port, path, tls = target(server, scenario)
    before = cpu_seconds(pid)
    if scenario.startswith("handshake"):
        started = time.monotonic()
        out = subprocess.run(["taskset", "-c", "1", "openssl", "s_time", "-connect", f"127.0.0.1:{port}",
                              "-new", "-www", path, "-time", str(seconds)],
                             capture_output=True, text=True).stdout
        elapsed = time.monotonic() - started  # s_time's own "real seconds" are whole seconds
        real = re.search(r"(\d+) connections in \d+ real seconds, (\d+) bytes read per connection", out)
        if not real or int(real.group(2)) == 0:
            sys.exit(f"s_time: {out[-500:]}")
        n = int(real.group(1))
        rate, errors = n / elapsed, 0
    else:
        url = f"{'https' if tls else 'http'}://127.0.0.1:{port}{path}"
        out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c32", f"-d{seconds}s", url],
                             capture_output=True, text=True).stdout
        n = int(re.search(r"(\d+) requests in", out).group(1))
        rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        errors = sum(int(x) for x in re.findall(r"(?:Non-2xx or 3xx responses|connect|read|write|timeout)[: ]+(\d+)", out))
    cpu = cpu_seconds(pid) - before
    return {"server": server, "scenario": scenario, "rate": rate, "count": n,
            "cpu_us": cpu / max(n, 1) * 1e6, "errors": errors}


def handshakes(kind):
    text = subprocess.run(["curl", "-s", f"http://127.0.0.1:{GW_ADMIN}/metrics"],
                          capture_output=True, text=True).stdout
    m = re.search(rf'wasmgate_tls_handshakes_total{{kind="{kind}"}} (\d+)', text)
    return int(m.group(1)) if m else 0


def plot(result):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)", file=sys.stderr)
        return
    summary = result["summary"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    x = list(range(len(SCENARIOS)))
    # Ratios, not absolute figures: handshakes (hundreds per second) and
    # keep-alive requests (a hundred thousand) would not share one axis.
    for ax, key, label, better in [
            (axes[0], "rate", "wasmgate / nginx, requests (handshakes) per second", "higher"),
            (axes[1], "cpu_us", "wasmgate / nginx, server CPU per request (handshake)", "lower")]:
        ratios = [summary[s]["wasmgate"][key] / summary[s]["nginx"][key] for s in SCENARIOS]
        bars = ax.bar(x, ratios, 0.6, color="tab:orange")
        ax.bar_label(bars, fmt="%.2f")
        ax.axhline(1.0, color="tab:blue", linewidth=1, label="nginx = 1.0")
        ax.set_xticks(x, SCENARIOS, rotation=20)
        ax.set_title(f"{label} ({better} is better)", fontsize=10)
        ax.set_ylim(0, max(ratios) * 1.2)
        ax.legend(loc="lower right")
    fig.suptitle(f"TLS: wasmgate vs nginx, same certificates, one worker each (medians of {result['rounds']} rounds)")
    fig.tight_layout()
    fig.savefig(os.path.join(ROOT, "docs", "img", "tls.png"), dpi=110)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    args = parser.parse_args()
    for tool in ("nginx", "wrk", "openssl", "curl"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode:
            sys.exit(f"{tool} is missing: scripts/install-deps.sh --bench")
    tmp = tempfile.mkdtemp(prefix="wasmgate-tls-bench.")
    make_certificates(tmp)
    processes = start(tmp)
    try:
        for server in SERVERS:
            for scenario in SCENARIOS:
                check(server, scenario)
        for server in SERVERS:  # warm-up: pools, upstream connections, caches
            for scenario in SCENARIOS:
                measure(server, scenario, 1, processes[server].pid)
        load_before = open("/proc/loadavg").read().split()[:3]
        resumed_before = handshakes("resumed")
        runs = []
        for r in range(1, args.rounds + 1):
            for scenario in SCENARIOS:
                for server in (SERVERS if r % 2 else SERVERS[::-1]):
                    run = measure(server, scenario, args.seconds, processes[server].pid)
                    run["round"] = r
                    runs.append(run)
                    print(json.dumps(run), file=sys.stderr)
        resumed = handshakes("resumed") - resumed_before
    finally:
        for p in processes.values():
            p.terminate()
        for p in processes.values():
            p.wait()
        subprocess.run(["rm", "-rf", tmp])
    summary = {s: {server: {k: statistics.median(r[k] for r in runs if r["scenario"] == s and r["server"] == server)
                            for k in ("rate", "cpu_us")}
                   for server in SERVERS} for s in SCENARIOS}
    result = {"rounds": args.rounds, "seconds": args.seconds, "loadavg_before": load_before,
              "loadavg_after": open("/proc/loadavg").read().split()[:3],
              "wasmgate_resumed_handshakes_in_keepalive_runs": resumed,
              "runs": runs, "summary": summary}
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "tls.json"), "w") as f:
        json.dump(result, f, indent=1)
    plot(result)
    print("| scenario | nginx /s | wasmgate /s | ratio | nginx CPU µs | wasmgate CPU µs | CPU ratio |")
    print("|---|---|---|---|---|---|---|")
    for s in SCENARIOS:
        n, w = summary[s]["nginx"], summary[s]["wasmgate"]
        print(f"| {s} | {n['rate']:,.0f} | {w['rate']:,.0f} | {w['rate'] / n['rate']:.2f}x "
              f"| {n['cpu_us']:.1f} | {w['cpu_us']:.1f} | {w['cpu_us'] / n['cpu_us']:.2f}x |")
    errors = sum(r["errors"] for r in runs)
    print(f"\nerrors: {errors}; wasmgate handshakes resumed during the runs: {resumed} "
          f"(wrk's keep-alive connections resume when they reconnect)")


if __name__ == "__main__":
    main()
