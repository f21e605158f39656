"""What the benchmarks read of a server process: its CPU time from /proc, the
steadier measure of cost on this noisy machine (issue 15: CPU time per
request beside req/s), and when it listens. Imported by the bench scripts next to this file, before
they take their own folder off sys.path (bench/http.py would shadow the
standard library's http package)."""

import os
import socket
import sys
import time


def cpu_seconds(pid):
    """The process's CPU time so far, user and system: fields 14 and 15 of
    /proc/<pid>/stat, counted after the command name in parentheses (which may
    itself hold spaces or parentheses)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_port(port, process):
    """Waits (up to a minute) until something listens on 127.0.0.1:`port`;
    exits the benchmark if `process`, which should, has died meanwhile."""
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if process.poll() is not None:
                sys.exit(f"the server for port {port} exited")
            time.sleep(0.1)
    sys.exit(f"nothing listens on port {port}")
