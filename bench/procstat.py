"""What the benchmarks read of a server process from /proc: its CPU time, the
steadier measure of cost on this noisy machine (issue 15: CPU time per
request beside req/s). Imported by the bench scripts next to this file, before
they take their own folder off sys.path (bench/http.py would shadow the
standard library's http package)."""

import os


def cpu_seconds(pid):
    """The process's CPU time so far, user and system: fields 14 and 15 of
    /proc/<pid>/stat, counted after the command name in parentheses (which may
    itself hold spaces or parentheses)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
