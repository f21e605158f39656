#!/usr/bin/env python3
"""What Higress's WAF (Coraza, built unchanged with standard Go) costs behind
`wasmgate run`, and where its time goes (issue 54, item 4).

One gateway (one worker, CPU 0) proxies to nginx (`return 200`, CPU 1) on two
routes: `/plain` with no filter and `/waf` through the WAF with the rules of
its README's example (without the CRS). wrk (CPU 1, `--connections`
clients) drives each route `--seconds`, alternating, `--rounds` times: req/s,
p99 and the gateway's CPU time per request, side by side. After the runs: the
WAF pool's instances, their linear memory, the process's RSS.

Then the WAF with the OWASP CRS it embeds (`useCRS: true`, as its README
configures it): how long a gateway takes to start with it (wall and CPU), an
instance's linear memory, whether SQL injection and XSS are refused and a
clean GET passes, and req/s of clean GETs through it (`max_instances: 1`:
each instance would cost another start).

Usage: bench/waf.py [--rounds 3] [--seconds 5] [--connections 20] [--no-crs | --only-crs]
                    [--plot docs/img/waf.png]
Writes bench/results/waf.json (--only-crs: waf-crs.json).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
from procstat import cpu_seconds, start_nginx, wait_port  # noqa: E402
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WASMGATE = os.path.join(ROOT, "target/release/wasmgate")
WAF = os.path.join(ROOT, "target/wasm/higress_plugin_waf.wasm")
PORT, ADMIN, UPSTREAM = 18931, 18932, 18933

# The README's rules (its example without `useCRS`), as a user starts.
README_RULES = """          secRules:
            - "SecDebugLogLevel 3"
            - "SecRuleEngine On"
            - "SecAction \\"id:100,phase:1,pass\\""
            - "SecRule REQUEST_URI \\"@streq /admin\\" \\"id:101,phase:1,t:lowercase,deny\\""
            - "SecRule REQUEST_BODY \\"@rx maliciouspayload\\" \\"id:102,phase:2,t:lowercase,deny\\""
"""
# With the CRS: its SQL injection and XSS rules read bodies too.
CRS_RULES = """          useCRS: true
          secRules:
            - "SecRuleEngine On"
            - "SecRequestBodyAccess On"
"""


def config(tmp, crs):
    waf_conf = CRS_RULES if crs else README_RULES
    # The CRS: a start of about a minute, callbacks of up to a second (XSS).
    pool = ("max_instances: 1, startup_timeout_ms: 600000, timeout_ms: 10000" if crs
            else "max_instances: 64")
    path = os.path.join(tmp, "crs.yaml" if crs else "waf.yaml")
    with open(path, "w") as f:
        f.write(f"""listen: 127.0.0.1:{PORT}
admin: 127.0.0.1:{ADMIN}
limits: {{threads: 1}}
plugins:
  - {{name: waf, wasm: {WAF}, {pool}}}
upstreams:
  - {{name: nginx, nodes: [{{address: 127.0.0.1:{UPSTREAM}}}]}}
routes:
  - name: waf
    path: {{prefix: /waf}}
    plugins:
      - plugin: waf
        conf:
{waf_conf}    upstream: nginx
  - {{name: plain, path: {{prefix: /plain}}, upstream: nginx}}
""")
    return path


def start_gateway(path):
    log = open(path + ".log", "w")
    began, gateway = time.time(), subprocess.Popen(
        ["taskset", "-c", "0", WASMGATE, "run", "-c", path, "--no-watch", "--log-level", "warn"],
        stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(6000):  # up to 10 minutes: the CRS takes about one
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/plain", timeout=1).read()
            break
        except OSError:
            if gateway.poll() is not None:
                sys.exit("the gateway exited while starting")
            time.sleep(0.1)
    return gateway, time.time() - began


def wrk(path, seconds, connections):
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", f"-c{connections}", f"-d{seconds}s",
                          "--latency", f"http://127.0.0.1:{PORT}{path}"],
                         capture_output=True, text=True, check=True).stdout
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 0.001, "ms": 1, "s": 1000}[p99.group(2)]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return requests, float(p99.group(1)) * scale, int(errors.group(1)) if errors else 0


def metrics():
    text = urllib.request.urlopen(f"http://127.0.0.1:{ADMIN}/metrics", timeout=5).read().decode()
    tag = 'plugin="waf",route="waf"'
    wanted = {"memory": f"wasmgate_plugin_memory_bytes{{{tag}}}",
              "idle": f'wasmgate_plugin_instances{{{tag},state="idle"}}',
              "created": f"wasmgate_plugin_instances_created_total{{{tag}}}"}
    found = {}
    for line in text.splitlines():
        for key, series in wanted.items():
            if line.startswith(series + " "):
                found[key] = float(line.split()[-1])
    return found


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


def status_of(url, body=None):
    try:
        return urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=180).status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError as e:
        return f"no answer ({e})"


def run_routes(args, gateway):
    rounds = []
    for r in range(args.rounds):
        for route in ("/plain", "/waf"):
            before = cpu_seconds(gateway.pid)
            requests, p99, errors = wrk(f"{route}/products?id=42", args.seconds, args.connections)
            cpu = cpu_seconds(gateway.pid) - before
            rounds.append({"round": r, "route": route, "rps": requests / args.seconds,
                           "cpu_us": cpu * 1e6 / requests, "p99_ms": p99, "errors": errors})
            print(f"round {r} {route:6} {requests / args.seconds:9.0f} req/s "
                  f"{cpu * 1e6 / requests:7.1f} us CPU/request  p99 {p99:7.2f} ms  non-2xx {errors}")
    return rounds


def crs(args, tmp):
    gateway, started = None, time.time()
    try:
        gateway, wall = start_gateway(config(tmp, crs=True))
        start_cpu = cpu_seconds(gateway.pid)
        url = f"http://127.0.0.1:{PORT}/waf"
        checks = {
            "clean GET": status_of(f"{url}/products?id=42"),
            "SQL injection (query)": status_of(f"{url}/products?id=1%27%20OR%20%271%27%3D%271"),
            "XSS (query)": status_of(f"{url}/search?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E"),
            "SQL injection (form body)": status_of(f"{url}/login", b"user=admin%27--&password=x"),
        }
        for what, status in checks.items():
            print(f"CRS: {what}: {status}")
        if any(not isinstance(status, int) for status in checks.values()):
            with open(os.path.join(tmp, "crs.yaml.log")) as f:
                print(f.read()[-3000:])
        requests, p99, errors = wrk("/waf/products?id=42", args.seconds, 4)
        found = metrics()
        result = {"start_wall_s": wall, "start_cpu_s": start_cpu, "checks": checks,
                  "rps": requests / args.seconds, "p99_ms": p99, "errors": errors,
                  "memory_mib": found.get("memory", 0) / 2**20, "rss_mib": rss_mib(gateway.pid)}
        print(f"CRS: started in {wall:.1f} s ({start_cpu:.1f} s CPU); "
              f"{result['rps']:.0f} req/s clean GET, p99 {p99:.1f} ms; "
              f"instance {result['memory_mib']:.0f} MiB linear memory, RSS {result['rss_mib']:.0f} MiB")
        return result
    finally:
        if gateway:
            gateway.terminate()
            gateway.wait(20)
        print(f"(CRS part: {time.time() - started:.0f} s)")


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for route, color in (("/plain", "tab:blue"), ("/waf", "tab:red")):
        rows = [r for r in result["rounds"] if r["route"] == route]
        left.bar([f"{route}\nround {r['round']}" for r in rows], [r["rps"] for r in rows], color=color)
        right.bar([f"{route}\nround {r['round']}" for r in rows], [r["cpu_us"] for r in rows], color=color)
    left.set_title("req/s (one worker, nginx upstream)")
    right.set_title("gateway CPU µs per request")
    for ax in (left, right):
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle(f"Higress's WAF, rules only: {result['ratio_rps']:.2f}x the req/s of no filter")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=20)
    parser.add_argument("--no-crs", action="store_true")
    parser.add_argument("--only-crs", action="store_true")
    parser.add_argument("--plot")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        nginx = start_nginx(os.path.join(tmp, "nginx"), f"""server {{
    listen 127.0.0.1:{UPSTREAM}; location / {{ return 200 "ok"; }} }}""")
        subprocess.run(["taskset", "-pc", "1", str(nginx.pid)], capture_output=True, check=True)
        try:
            wait_port(UPSTREAM, nginx)
            if args.only_crs:
                result = {"crs": crs(args, tmp)}
                return save(result, args)
            gateway, _ = start_gateway(config(tmp, crs=False))
            try:
                rounds = run_routes(args, gateway)
                after = metrics()
                rss = rss_mib(gateway.pid)
            finally:
                gateway.terminate()
                gateway.wait(20)
            mean = {route: sum(r["rps"] for r in rounds if r["route"] == route) / args.rounds
                    for route in ("/plain", "/waf")}
            cpu = {route: sum(r["cpu_us"] for r in rounds if r["route"] == route) / args.rounds
                   for route in ("/plain", "/waf")}
            result = {"rounds": rounds, "ratio_rps": mean["/waf"] / mean["/plain"],
                      "cpu_us": cpu, "instances": after.get("idle"),
                      "created": after.get("created"),
                      "memory_mib": after.get("memory", 0) / 2**20, "rss_mib": rss}
            print(f"WAF rules only: {result['ratio_rps']:.3f}x the req/s of no filter; "
                  f"CPU {cpu['/waf']:.1f} vs {cpu['/plain']:.1f} us/request; "
                  f"{after.get('idle')} instances ({after.get('created')} created), "
                  f"{result['memory_mib']:.0f} MiB linear memory, RSS {rss:.0f} MiB")
            if not args.no_crs:
                result["crs"] = crs(args, tmp)
        finally:
            nginx.terminate()
            nginx.wait(10)
    save(result, args)


def save(result, args):
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    name = "waf-crs.json" if args.only_crs else "waf.json"
    with open(os.path.join(ROOT, "bench/results", name), "w") as f:
        json.dump(result, f, indent=1)
    if args.plot and not args.only_crs:
        plot(result, args.plot)


if __name__ == "__main__":
    main()
