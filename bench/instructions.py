#!/usr/bin/env python3
"""Instructions per request of a server, counted by valgrind's callgrind.

This machine's req/s moves 10-20 % between runs and its VM has no hardware
counters (`perf stat -e instructions` is not supported), so small steps in a
server's cost drown in noise. Callgrind counts the instructions the server
executes, which for the same binary and requests is the same number whatever
else the machine is doing (docs/benchmarks.md, "Instructions per request").

The server runs under callgrind; after WARMUP requests on one keep-alive
connection the counters are zeroed (`callgrind_control -z`), REQUESTS more are
sent, and the counters are dumped: the instructions of the busiest thread (the
worker, with `--threads 1`) and of all threads, divided by REQUESTS.

Usage:
  bench/instructions.py NAME -- COMMAND... (with {port} where the port goes)
  bench/instructions.py serve -- target/release/wasmgate serve \
      target/wasm/hello.wasm hello --threads 1 --port {port} --log-level warn
Options: --path /, --body 'John Doe' (POST; no body: GET), --requests 2000,
--warmup 300, --connections 1 (each its own thread), --expect TEXT (checked in every answer), --json FILE (appends),
--config FILE (a copy with {port} filled in is passed where {config} is).
With --annotate N, prints the N functions with the most instructions; with
--components, the instructions per request of each part of the program
(COMPONENTS below: the first pattern a function's name matches). With
--cache-sim, callgrind also simulates the caches and the first-level data
misses (reads and writes) per request are printed too, and --annotate lists
the functions with the most of them: how `serve`'s lost 10 % was found, a
cost in memory touched rather than in instructions.
"""

import argparse
import glob
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

# bench/http.py would shadow the standard library's http package.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
import http.client  # noqa: E402


# (part, pattern on callgrind_annotate's "file:function [object]"), first match wins.
COMPONENTS = [
    ("wasm code (JIT)", r"^0x[0-9a-f]+ \[\?\?\?\]"),
    ("memcpy/memmove", r"mem(cpy|move)"),
    ("malloc/free", r"\bmi_|_mi_|malloc|free\b|realloc"),
    ("clock reads", r"clock_gettime|Timespec|Instant"),
    ("wasmtime: calls, fibers, traps", r"wasmtime"),
    ("proxy-wasm host (ABI, stream)", r"wasmgate_proxy_wasm"),
    ("extism host", r"wasmgate_extism"),
    ("runtime (budget, pool, slow lane, stats)", r"wasmgate_runtime"),
    ("gateway (routing, chain, proxy, upstreams, listener)",
     r"wasmgate_(gateway|cli|routing|upstream|transport|answers|observe|base|config)"),
    ("hyper, http, httparse", r"hyper|\bhttp::|httparse|h2::"),
    ("tokio, mio", r"tokio|mio::"),
    ("nginx", r"\[/usr/sbin/nginx\]"),
    ("libc, other", r""),
]


def exclusive_costs(dump, events=("Ir",)):
    """Instructions per function ("function [object]") in a callgrind file,
    or the sum of other `events` (D1mr, D1mw with --cache-sim).

    Parsed here rather than by callgrind_annotate, whose exclusive figures
    (valgrind 3.19) put every instruction of some dumps on `clone`. A cost
    line right after `calls=` is the call's inclusive cost, not the caller's.
    """
    names = {"fn": {}, "ob": {}}
    costs = {}
    columns = [1]
    function, obj, after_call = "?", "?", False

    def name(kind, spec):
        match = re.match(r"\((\d+)\)(?: (.*))?", spec)
        if not match:
            return spec
        if match.group(2):
            names[kind][match.group(1)] = match.group(2)
        return names[kind].get(match.group(1), spec)

    with open(dump, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("events:"):
                names_of_events = line.split()[1:]
                columns = [1 + names_of_events.index(e) for e in events]
            elif line.startswith("ob="):
                obj = name("ob", line[3:])
            elif line.startswith("fn="):
                function = name("fn", line[3:])
            elif line.startswith(("cob=", "cfn=")):
                name(line[1:3], line[4:])
            elif line.startswith("calls="):
                after_call = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                fields = line.split()
                if not after_call and len(fields) > 1:
                    key = f"{function} [{obj}]"
                    # Trailing events that are zero are left out.
                    cost = sum(int(fields[c]) for c in columns if c < len(fields))
                    costs[key] = costs.get(key, 0) + cost
                after_call = False
    return costs


def components(costs, requests):
    """Instructions per request of each part in COMPONENTS."""
    parts = {name: 0 for name, _ in COMPONENTS}
    for function, count in costs.items():
        for name, pattern in COMPONENTS:
            if re.search(pattern, function):
                parts[name] += count
                break
    return {name: count / requests for name, count in parts.items()}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, seconds=300):
    end = time.time() + seconds
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("server did not start listening")


def send_concurrently(conns, args, count):
    """`count` requests shared over the keep-alive connections `conns`, each
    on its own thread, all at once."""
    errors = []

    def one(conn, share):
        try:
            send(conn, args, share)
        except Exception as error:  # reported below, after the other threads
            errors.append(error)

    shares = [count // len(conns) + (i < count % len(conns)) for i in range(len(conns))]
    threads = [threading.Thread(target=one, args=pair) for pair in zip(conns, shares)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def send(conn, args, count):
    for _ in range(count):
        try:
            answer = ask(conn, args)
        except (http.client.RemoteDisconnected, ConnectionResetError):
            # The server closed the idle keep-alive connection (the pause
            # while callgrind zeroes its counters can outlast a server's
            # idle limit): open it again (`HTTPConnection` reconnects by
            # itself) and ask once more; one accept among the requests.
            conn.close()
            answer = ask(conn, args)
        data = answer.read()
        if answer.status != 200 or (args.expect and args.expect.encode() not in data):
            raise RuntimeError(f"unexpected answer {answer.status}: {data[:200]!r}")


def ask(conn, args):
    if args.body is None:
        conn.request("GET", args.path)
    else:
        conn.request("POST", args.path, body=args.body.encode())
    return conn.getresponse()


def thread_totals(prefix):
    """Instructions per thread in the dump files that start with `prefix`."""
    totals = {}
    for path in glob.glob(prefix + "*"):
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith("totals:") or line.startswith("summary:"):
                    totals[path] = int(line.split()[1])
                    break
    return totals


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("command", nargs="+")
    parser.add_argument("--path", default="/")
    parser.add_argument("--body", default=None)
    parser.add_argument("--expect", default=None)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--json", default=None)
    parser.add_argument("--annotate", type=int, default=0)
    parser.add_argument("--config", default=None)
    parser.add_argument("--components", action="store_true")
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--cache-sim", action="store_true")
    args = parser.parse_args()

    # valgrind 3.19's callgrind sometimes aborts on its own assertion about
    # signals (threads.c:247, vgCallgrind_post_signal) while the server
    # starts a thread mid-run (a filter's first long call under callgrind's
    # slowdown starts the slow lane). The count is deterministic, so a run
    # that died is simply run again.
    for attempt in range(1, ATTEMPTS + 1):
        try:
            out, totals = measure(args)
            break
        except (OSError, http.client.HTTPException, RuntimeError, subprocess.SubprocessError) as error:
            if attempt == ATTEMPTS:
                raise
            sys.stderr.write(f"{args.name}: callgrind run {attempt} failed ({error!r}); again\n")
    report(args, out, totals)


ATTEMPTS = 4


def measure(args):
    """One run under callgrind: the dump's directory and its per-thread totals."""
    port = free_port()
    out = tempfile.mkdtemp(prefix="wasmgate-instructions.")
    config = f"{out}/config.yaml"
    if args.config:
        with open(args.config) as template, open(config, "w") as filled:
            filled.write(template.read().replace("{port}", str(port)))
    command = [part.replace("{port}", str(port)).replace("{config}", config)
               for part in args.command]
    valgrind = [
        "valgrind", "--tool=callgrind", "--separate-threads=yes",
        # wasm code is written at run time (or mapped from the compile cache).
        "--smc-check=all-non-file",
        f"--callgrind-out-file={out}/cg.out",
    ] + (["--cache-sim=yes"] if args.cache_sim else [])
    # More of callgrind's options for a closer look (`--dump-instr=yes`
    # gives each call site its own counts): CALLGRIND_ARGS="...".
    valgrind += os.environ.get("CALLGRIND_ARGS", "").split()
    log = open(f"{out}/valgrind.log", "w")
    proc = subprocess.Popen(valgrind + command, stdout=log, stderr=subprocess.STDOUT)
    try:
        try:
            wait_listening(port, proc)
        except RuntimeError:
            sys.stderr.write(open(f"{out}/valgrind.log").read()[-3000:])
            raise
        # The same connections warm up and are measured: no connection is
        # accepted inside the measured window.
        conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                 for _ in range(args.connections)]
        send_concurrently(conns, args, args.warmup)
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        send_concurrently(conns, args, args.requests)
        subprocess.run(["callgrind_control", "-d", "measured", str(proc.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for conn in conns:
            conn.close()
    except BaseException:
        proc.kill()
        proc.wait(timeout=120)
        subprocess.run(["rm", "-rf", out])
        raise
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    # The dump asked for above is the first numbered one: cg.out.1-<thread>.
    totals = thread_totals(f"{out}/cg.out.1-")
    if not totals:
        raise RuntimeError(f"no callgrind dump in {out}")
    return out, totals


def report(args, out, totals):
    busiest = max(totals, key=totals.get)
    row = {
        "name": args.name,
        "requests": args.requests,
        "worker_per_request": totals[busiest] / args.requests,
        "all_threads_per_request": sum(totals.values()) / args.requests,
        "threads": len(totals),
        "command": " ".join(args.command),
    }
    print(f"{args.name:<24} {row['worker_per_request']:>12,.0f} instructions per request "
          f"on the worker ({row['all_threads_per_request']:,.0f} all threads)")
    costs = exclusive_costs(busiest)
    # What --annotate ranks functions by: instructions, or data-cache misses.
    ranked = costs
    if args.cache_sim:
        ranked = exclusive_costs(busiest, ("D1mr", "D1mw"))
        row["d1_misses_per_request"] = sum(ranked.values()) / args.requests
        print(f"{'':<24} {row['d1_misses_per_request']:>12,.1f} first-level data-cache misses per request")
    if args.components:
        row["components"] = components(costs, args.requests)
        for name, count in row["components"].items():
            print(f"  {count:>10,.0f}  {name}")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(row) + "\n")
    if args.annotate:
        for function, count in sorted(ranked.items(), key=lambda c: -c[1])[: args.annotate]:
            print(f"{count / args.requests:>10,.0f}  {function[:150]}")
    if not args.annotate:
        subprocess.run(["rm", "-rf", out])


if __name__ == "__main__":
    main()
