#!/usr/bin/env python3
"""Cluster benchmark (issue 16, docs/benchmarks.md "Cluster"): three
`wasmgate run` nodes with their configuration in etcd and a rate limit in
Redis, all on this machine.

It measures, in one run:
  - propagation: CHANGES route edits through the admin API, rotating over the
    nodes; for each, the time from sending the PUT until every node serves the
    new answer (polled every 2 ms per node);
  - lost requests: wrk keeps a steady route busy on every node during the
    edits; every non-2xx answer or socket error is a lost request;
  - etcd's load per change, from etcd's /metrics before and after the edits,
    next to the same counters over an idle period as long;
  - rate-limit accuracy: Higress's rate limit (plugins/higress/rate_limit)
    with a limit of LIMIT per minute for one key, 3 * LIMIT requests sent
    concurrently over the three nodes; allowed must be exactly LIMIT.

Writes bench/results/cluster.json and docs/img/cluster.png.
Usage: bench/cluster.py [--changes 100] [--limit 300]
"""

import os
import sys

# bench/http.py, next to this script, would shadow the standard library's
# http package.
HERE = os.path.dirname(os.path.abspath(__file__))
from procstat import cpu_seconds  # noqa: E402 (from this folder, before it leaves sys.path)
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import argparse
import concurrent.futures
import http.client
import json
import re
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WASMGATE = os.path.join(ROOT, "target/release/wasmgate")
WASM = os.path.join(ROOT, "target/wasm")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, what, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting for {what}")


class Servers:
    """etcd, redis-server and three nodes, in a temporary directory."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []
        self.etcd_port, peer = free_port(), free_port()
        self.etcd = f"http://127.0.0.1:{self.etcd_port}"
        # etcd's data in memory: this shared VM's disk has stalled fsync
        # for 5 s, which would measure the disk, not the cluster.
        self.etcd_dir = tempfile.mkdtemp(prefix="wasmgate-bench-etcd-", dir="/dev/shm")
        self.spawn(["etcd", "--name", "bench", "--data-dir", self.etcd_dir,
                    "--listen-client-urls", self.etcd, "--advertise-client-urls", self.etcd,
                    "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                    "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                    "--initial-cluster", f"bench=http://127.0.0.1:{peer}",
                    "--log-level", "warn", "--logger", "zap"], "etcd")
        wait_for(lambda: urllib.request.urlopen(self.etcd + "/health", timeout=1).status == 200, "etcd")
        self.redis_port = free_port()
        self.spawn(["redis-server", "--port", str(self.redis_port), "--save", "", "--appendonly", "no"], "redis")
        wait_for(lambda: socket.create_connection(("127.0.0.1", self.redis_port), 1), "redis")
        self.nodes = []

    def spawn(self, argv, name):
        log = open(f"{self.tmp}/{name}.log", "wb")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))

    def push(self, limit):
        config = f"""
services:
  - {{name: redis, redis: "redis://127.0.0.1:{self.redis_port}/0"}}
plugins:
  - {{name: limit, wasm: "{WASM}/higress_rate_limit.wasm", services: [redis]}}
  - {{name: tag, wasm: "{WASM}/add_header.wasm"}}
routes:
  - name: limited
    path: {{prefix: /limited}}
    plugins: [{{plugin: limit, conf: {{redis: {{service_name: redis}}, limit: {limit}, window_seconds: 60, key_header: x-api-key}}}}]
    respond: {{status: 200, body: ok}}
  - {{name: steady, path: {{prefix: /steady}}, plugins: [{{plugin: tag, conf: v1}}], respond: {{status: 200, body: steady}}}}
  - {{name: prop, path: {{prefix: /prop}}, respond: {{status: 200, body: v0}}}}
"""
        path = f"{self.tmp}/cluster.yaml"
        with open(path, "w") as f:
            f.write(config)
        subprocess.run([WASMGATE, "config", "push", "-c", path, "--etcd", self.etcd], check=True,
                       stdout=subprocess.DEVNULL)

    def start_nodes(self, count):
        for i in range(1, count + 1):
            listen, admin = free_port(), free_port()
            path = f"{self.tmp}/node{i}.yaml"
            with open(path, "w") as f:
                f.write(f'listen: "127.0.0.1:{listen}"\nadmin: "127.0.0.1:{admin}"\n'
                        f'limits: {{threads: 1}}\n'
                        f'config: {{etcd: ["{self.etcd}"], node_name: node{i}}}\n')
            # The filter on /steady logs every request at info: keep the
            # plugins' lines out of the nodes' logs, reloads stay in.
            self.spawn([WASMGATE, "run", "-c", path, "--log-level", "info,wasmgate::filter=warn"],
                       f"node{i}")
            self.nodes.append({"name": f"node{i}", "listen": listen, "admin": admin,
                               "pid": self.procs[-1].pid})
        for n in self.nodes:
            wait_for(lambda: get(n["listen"], "/prop")[1] == "v0", n["name"])

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.etcd_dir, ignore_errors=True)


def get(port, path, headers=None, conn=None):
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        if own:
            conn.close()


def put_route(admin_port, name, body):
    conn = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=10)
    conn.request("PUT", f"/routes/{name}", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    return r.status, text


def etcd_metrics(etcd):
    text = urllib.request.urlopen(etcd + "/metrics", timeout=5).read().decode()
    wanted = {
        "puts": r'^etcd_mvcc_put_total (\S+)',
        "txns": r'^etcd_mvcc_txn_total (\S+)',
        "events": r'^etcd_debugging_mvcc_events_total (\S+)',
        "bytes_sent": r'^etcd_network_client_grpc_sent_bytes_total (\S+)',
        "bytes_received": r'^etcd_network_client_grpc_received_bytes_total (\S+)',
        "watch_msgs": r'^grpc_server_msg_sent_total\{grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"\} (\S+)',
        "range_calls": r'^grpc_server_handled_total\{grpc_code="OK",grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"\} (\S+)',
        "lease_keepalives": r'^grpc_server_msg_received_total\{grpc_method="LeaseKeepAlive",grpc_service="etcdserverpb.Lease",grpc_type="bidi_stream"\} (\S+)',
    }
    out = {}
    for key, pattern in wanted.items():
        m = re.search(pattern, text, re.M)
        out[key] = float(m.group(1)) if m else 0.0
    return out


def propagation(servers, changes, first):
    """Edits /prop `changes` times, each through the next node's admin API;
    returns (seconds until every node serves it, seconds the PUT took)."""
    conns = {n["name"]: http.client.HTTPConnection("127.0.0.1", n["listen"], timeout=5)
             for n in servers.nodes}
    totals, puts = [], []
    for i in range(first, first + changes):
        writer = servers.nodes[i % len(servers.nodes)]
        expected = f"v{i}"
        started = time.monotonic()
        status, text = put_route(writer["admin"], "prop",
                                 {"path": {"prefix": "/prop"}, "respond": {"status": 200, "body": expected}})
        put_done = time.monotonic()
        if status not in (200, 201):
            raise SystemExit(f"PUT {i} through {writer['name']}: {status} {text}")
        pending = list(servers.nodes)
        while pending:
            for n in list(pending):
                try:
                    _, body = get(None, "/prop", conn=conns[n["name"]])
                except (OSError, http.client.HTTPException):
                    conns[n["name"]] = http.client.HTTPConnection("127.0.0.1", n["listen"], timeout=5)
                    continue
                if body == expected:
                    pending.remove(n)
            if time.monotonic() - started > 20:
                raise SystemExit(f"change {i} did not reach {[n['name'] for n in pending]}")
            if pending:
                time.sleep(0.002)
        totals.append(time.monotonic() - started)
        puts.append(put_done - started)
    return totals, puts


def wrk_steady(servers, seconds):
    """Starts wrk against /steady on every node; returns the processes."""
    procs = []
    for n in servers.nodes:
        procs.append(subprocess.Popen(
            ["wrk", "-t1", "-c4", f"-d{seconds}s", "--timeout", "5s",
             f"http://127.0.0.1:{n['listen']}/steady"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return procs


def parse_wrk(text):
    total = int(re.search(r"(\d+) requests in", text).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    return {
        "requests": total,
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": sum(int(x) for x in errors.groups()) if errors else 0,
    }


def rate_limit(servers, limit):
    """3 * limit requests with one key, 16 at a time, over all nodes."""
    total = 3 * limit
    key = f"bench-{time.time_ns()}"

    def one(i):
        n = servers.nodes[i % len(servers.nodes)]
        return get(n["listen"], "/limited", headers={"x-api-key": key})[0]

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        statuses = list(pool.map(one, range(total)))
    return {"limit": limit, "sent": total, "allowed": statuses.count(200),
            "limited": statuses.count(429),
            "other": len(statuses) - statuses.count(200) - statuses.count(429)}


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--changes", type=int, default=100)
    ap.add_argument("--limit", type=int, default=300)
    args = ap.parse_args()
    for tool in ("etcd", "redis-server", "wrk"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is needed (scripts/install-deps.sh --bench)")
    tmp = tempfile.mkdtemp(prefix="wasmgate-cluster-bench-")
    servers = Servers(tmp)
    try:
        servers.push(args.limit)
        servers.start_nodes(3)
        time.sleep(1)

        # Idle: what three nodes cost etcd with no change (lease keep-alives).
        idle_seconds = 10
        before = etcd_metrics(servers.etcd)
        time.sleep(idle_seconds)
        idle = {k: v - before[k] for k, v in etcd_metrics(servers.etcd).items()}

        # Changes with no other traffic: what the machinery itself takes.
        quiet_totals, _ = propagation(servers, args.changes, first=1)

        # Changes under steady traffic.
        cpu_before = {n["name"]: cpu_seconds(n["pid"]) for n in servers.nodes}
        before = etcd_metrics(servers.etcd)
        wrk_seconds = max(10, args.changes // 4)
        load = wrk_steady(servers, wrk_seconds)
        time.sleep(0.5)
        changes_started = time.monotonic()
        totals, puts = propagation(servers, args.changes, first=args.changes + 1)
        changes_seconds = time.monotonic() - changes_started
        after = etcd_metrics(servers.etcd)
        per_change = {k: (after[k] - before[k]) / args.changes for k in after}
        traffic = [parse_wrk(p.communicate()[0]) for p in load]
        cpu = {n["name"]: cpu_seconds(n["pid"]) - cpu_before[n["name"]] for n in servers.nodes}

        limited = rate_limit(servers, args.limit)
    finally:
        servers.stop()
    ms = [t * 1000 for t in totals]
    quiet_ms = [t * 1000 for t in quiet_totals]
    put_ms = [t * 1000 for t in puts]
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "changes": args.changes,
        "propagation_ms": {"p50": percentile(ms, 50), "p90": percentile(ms, 90),
                           "p99": percentile(ms, 99), "max": max(ms), "mean": statistics.mean(ms),
                           "all": ms},
        "propagation_quiet_ms": {"p50": percentile(quiet_ms, 50), "p90": percentile(quiet_ms, 90),
                                 "p99": percentile(quiet_ms, 99), "max": max(quiet_ms),
                                 "all": quiet_ms},
        "put_ms": {"p50": percentile(put_ms, 50), "p99": percentile(put_ms, 99)},
        "changes_seconds": changes_seconds,
        "wrk_seconds": wrk_seconds,
        "steady_traffic": traffic,
        "lost_requests": sum(t["non_2xx"] + t["socket_errors"] for t in traffic),
        "etcd_per_change": per_change,
        "etcd_idle_per_second": {k: v / idle_seconds for k, v in idle.items()},
        "node_cpu_seconds_during_changes": cpu,
        "rate_limit": limited,
    }
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench/results/cluster.json"), "w") as f:
        json.dump(result, f, indent=1)
    plot(result)
    shutil.rmtree(tmp, ignore_errors=True)
    summary = dict(result)
    for key in ("propagation_ms", "propagation_quiet_ms"):
        summary[key] = {k: round(v, 1) for k, v in result[key].items() if k != "all"}
    print(json.dumps(summary, indent=1))


def plot(result):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    ms = result["propagation_ms"]["all"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    quiet = result["propagation_quiet_ms"]["all"]
    left.plot(range(1, len(quiet) + 1), quiet, ".", color="tab:green", label="no other traffic")
    left.plot(range(1, len(ms) + 1), ms, ".", color="tab:blue", label="under wrk on every node")
    left.axhline(250, color="tab:red", linestyle="--", label="target p99 250 ms")
    left.axhline(result["propagation_ms"]["p99"], color="tab:blue", linestyle=":",
                 label=f"p99 {result['propagation_ms']['p99']:.0f} ms")
    left.set_xlabel("change (admin PUT, rotating over 3 nodes)")
    left.set_ylabel("ms until all 3 nodes serve it")
    left.set_ylim(bottom=0)
    left.legend(fontsize=8)
    left.set_title("propagation")
    ordered = sorted(ms)
    right.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], color="tab:blue",
               label="under wrk")
    quiet_ordered = sorted(quiet)
    right.plot(quiet_ordered, [(i + 1) / len(quiet_ordered) for i in range(len(quiet_ordered))],
               color="tab:green", label="no other traffic")
    right.legend(fontsize=8)
    right.set_xlabel("ms")
    right.set_ylabel("fraction of changes")
    right.set_title(f"CDF; lost requests under traffic: {result['lost_requests']}")
    fig.suptitle(f"3 nodes, etcd, {result['changes']} changes ({result['date']} UTC)", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(ROOT, "docs/img/cluster.png"), dpi=110)


if __name__ == "__main__":
    main()
