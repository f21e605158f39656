"""What the benchmarks read of a server process: its CPU time from /proc, the
steadier measure of cost on this noisy machine (issue 15: CPU time per
request beside req/s), and when it listens; and nginx started the way they all
run it. Imported by the bench scripts next to this file, before
they take their own folder off sys.path (bench/http.py would shadow the
standard library's http package)."""

import os
import socket
import subprocess
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


def start_nginx(directory, http_block):
    """nginx as the benchmarks run it: one process, one worker, pinned to
    CPU 0, no access log, temp files in `directory`; `http_block` holds its
    upstreams and servers. Returns the process."""
    d = directory
    os.makedirs(d)
    with open(f"{d}/nginx.conf", "w") as f:
        f.write(f"""daemon off; master_process off; worker_processes 1;
pid {d}/nginx.pid; error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off; keepalive_requests 1000000;
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/f; uwsgi_temp_path {d}/u; scgi_temp_path {d}/s;
  {http_block}
}}
""")
    return subprocess.Popen(["taskset", "-c", "0", "nginx", "-p", d, "-e", f"{d}/error.log",
                             "-c", f"{d}/nginx.conf"])
