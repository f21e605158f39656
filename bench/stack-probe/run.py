#!/usr/bin/env python3
"""HTTP stack probe: hello servers and reverse proxies on hyper 1.x and
Pingora 0.9 against nginx, side by side in one run. Servers (and the upstream)
are pinned to CPU 0, wrk to CPU 1; variants are interleaved over rounds.
Usage: bench/stack-probe/run.py [--rounds N] [--seconds S] [--only hello|proxy]
(the proxy test includes wasmgate: build target/release/wasmgate first)"""
import argparse, json, os, re, signal, socket, statistics, subprocess, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.join(HERE, "target", "release")
TMP = tempfile.mkdtemp(prefix="stack-probe-")
UPSTREAM = 18300
BODY = '{"message":"Hello John Doe"}'

def nginx_conf(name, server_block):
    path = os.path.join(TMP, f"{name}.conf")
    with open(path, "w") as f:
        f.write(f"""worker_processes 1; daemon off; pid {TMP}/{name}.pid; error_log {TMP}/{name}.err;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 1000000;
  upstream up {{ server 127.0.0.1:{UPSTREAM}; keepalive 128; }}
  {server_block} }}
""")
    return path

def yaml(name, text):
    path = os.path.join(TMP, f"{name}.yaml")
    with open(path, "w") as f:
        f.write("---\nversion: 1\n" + text)
    return path

def hello_block(port):
    return f"server {{ listen 127.0.0.1:{port}; location / {{ default_type application/json; return 200 '{BODY}'; }} }}"

def proxy_block(port):
    return (f"server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass http://up; "
            f"proxy_http_version 1.1; proxy_set_header Connection \"\"; }} }}")

WASMGATE = os.path.join(HERE, "..", "..", "target", "release", "wasmgate")

def gateway_conf(port):
    path = os.path.join(TMP, f"gateway{port}.yaml")
    with open(path, "w") as f:
        f.write(f"listen: 127.0.0.1:{port}\nlimits: {{threads: 1}}\naccess_log: {{enabled: false}}\n"
                f"upstreams: [{{name: up, nodes: [{{address: 127.0.0.1:{UPSTREAM}}}]}}]\n"
                "routes: [{name: proxy, path: {prefix: /}, upstream: up}]\n")
    return path

PINGORA_DEFAULT = yaml("pingora-default", "")
PINGORA_TUNED = yaml("pingora-tuned", "threads: 1\nwork_stealing: false\nupstream_keepalive_pool_size: 256\n")

VARIANTS = {
    "hello": {
        "nginx": lambda p: ["nginx", "-c", nginx_conf(f"hello{p}", hello_block(p))],
        "hyper": lambda p: [f"{BIN}/hyper-hello", str(p)],
        "pingora": lambda p: [f"{BIN}/pingora-probe", "hello", str(p), "-c", PINGORA_DEFAULT],
        "pingora-tuned": lambda p: [f"{BIN}/pingora-probe", "hello", str(p), "-c", PINGORA_TUNED],
    },
    "proxy": {
        "nginx": lambda p: ["nginx", "-c", nginx_conf(f"proxy{p}", proxy_block(p))],
        "hyper": lambda p: [f"{BIN}/hyper-proxy", str(p), str(UPSTREAM)],
        # Issue 57's design step: hyper's connection API alone, the lean codec, wasmgate itself.
        "hyper-conn": lambda p: [f"{BIN}/hyper-conn-proxy", str(p), str(UPSTREAM)],
        "lean": lambda p: [f"{BIN}/lean-proxy", str(p), str(UPSTREAM)],
        "wasmgate": lambda p: [WASMGATE, "run", "-c", gateway_conf(p), "--no-watch", "--log-level", "warn"],
        "pingora": lambda p: [f"{BIN}/pingora-probe", "proxy", str(p), str(UPSTREAM), "-c", PINGORA_DEFAULT],
        "pingora-tuned": lambda p: [f"{BIN}/pingora-probe", "proxy", str(p), str(UPSTREAM), "-c", PINGORA_TUNED],
    },
}

def start(cmd):
    return subprocess.Popen(["taskset", "-c", "0"] + cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

def wait(port, proc):
    for _ in range(400):
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("no listener")

def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()

def wrk(port, seconds, conns=50):
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency",
                          f"http://127.0.0.1:{port}/"], capture_output=True, text=True, check=True).stdout
    lat = lambda label: float(re.search(rf"^\s+{label}%\s+([\d.]+)", out, re.M).group(1)) * \
        {"us": 0.001, "ms": 1, "s": 1000}[re.search(rf"^\s+{label}%\s+[\d.]+(\w+)", out, re.M).group(1)]
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)), lat("50"), lat("99"), int(bad.group(1)) if bad else 0

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=6)
    ap.add_argument("--only", default=None, help="one test: hello or proxy")
    args = ap.parse_args()
    upstream = start(["nginx", "-c", nginx_conf("upstream", hello_block(UPSTREAM))])
    wait(UPSTREAM, upstream)
    results, port = [], 18310
    try:
        for rnd in range(args.rounds):
            for kind, servers in VARIANTS.items():
                if args.only and kind != args.only:
                    continue
                for name, cmd in servers.items():
                    port += 1
                    proc = start(cmd(port))
                    try:
                        wait(port, proc)
                        wrk(port, 1)
                        rps, p50, p99, bad = wrk(port, args.seconds)
                    finally:
                        stop(proc)
                    row = dict(kind=kind, server=name, round=rnd, rps=rps, p50_ms=p50, p99_ms=p99, non2xx=bad)
                    print(json.dumps(row), flush=True)
                    results.append(row)
    finally:
        stop(upstream)
    out = os.path.join(HERE, "..", "results", f"stack-probe{'-' + args.only if args.only else ''}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    json.dump(results, open(out, "w"), indent=1)
    print("\n| test | server | req/s (median) | p50 | p99 | vs nginx |\n|---|---|---|---|---|---|")
    for kind in VARIANTS:
        if args.only and kind != args.only:
            continue
        med = {s: statistics.median(r["rps"] for r in results if r["kind"] == kind and r["server"] == s) for s in VARIANTS[kind]}
        for s in VARIANTS[kind]:
            rows = [r for r in results if r["kind"] == kind and r["server"] == s]
            print(f"| {kind} | {s} | {med[s]:,.0f} | {statistics.median(r['p50_ms'] for r in rows):.2f} ms | "
                  f"{statistics.median(r['p99_ms'] for r in rows):.2f} ms | {med[s] / med['nginx']:.2f} |")

if __name__ == "__main__":
    main()
