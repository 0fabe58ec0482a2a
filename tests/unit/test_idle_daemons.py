"""The local server's daemon reaper (``spark_cdc.testing.idle_daemons``) on a real process
tree: a process standing for the server, with two Python worker daemons under it (their
command line is Spark's, ``-m pyspark.daemon``), one of them busy with a worker, and one
more daemon outside the server's tree. Only the server's idle daemon is stopped, and only
once it has been idle for the time given."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from spark_cdc.testing.idle_daemons import IdleDaemonReaper

SLEEP = "import time; time.sleep(60)"
# A daemon: its command line holds Spark's; with a worker, it starts one with the same line
# (a forked worker carries its daemon's command line).
DAEMON = """
import subprocess, sys, time
if sys.argv[-1] == "busy":
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-m", "pyspark.daemon"])
time.sleep(60)
"""
SERVER = f"""
import subprocess, sys, time
for kind in ("idle", "busy"):
    subprocess.Popen([sys.executable, "-c", {DAEMON!r}, "-m", "pyspark.daemon", kind])
subprocess.Popen([sys.executable, "-c", {SLEEP!r}])  # not a daemon
time.sleep(60)
"""


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started = [  # each in a process group of its own, which the end kills whole
        subprocess.Popen([sys.executable, "-c", SERVER], start_new_session=True),
        subprocess.Popen(
            [sys.executable, "-c", DAEMON, "-m", "pyspark.daemon", "idle"], start_new_session=True
        ),
    ]
    yield started
    for process in started:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _tree(root: int) -> dict[str, int]:
    """The daemons under ``root`` by kind, and their workers."""
    lines = subprocess.run(
        ["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    rows = [line.split(None, 2) for line in lines]
    children = {int(pid): int(parent) for pid, parent, _ in rows}
    found = {}
    for pid, parent, args in rows:
        if "pyspark.daemon" in args and int(parent) == root:
            found[args.split()[-1]] = int(pid)
        elif "pyspark.daemon" in args and children.get(int(parent)) == root:
            found["worker"] = int(pid)
    return found


def test_the_servers_idle_daemon_is_stopped_once_idle_long_enough(
    processes: list[subprocess.Popen[bytes]],
) -> None:
    server, outside = processes
    # The tree starts. A process forked but not yet exec'd shows its parent's command line
    # (the server's holds "pyspark.daemon"), so wait for the whole tree, not for 3 processes.
    for _ in range(200):
        tree = _tree(server.pid)
        if set(tree) == {"idle", "busy", "worker"}:
            break
        time.sleep(0.05)
    assert set(tree) == {"idle", "busy", "worker"}
    reaper = IdleDaemonReaper(server.pid, idle_seconds=10)
    assert reaper.reap(now=0) == []  # first seen: idle from now
    assert reaper.reap(now=9) == []
    assert reaper.reap(now=10) == [tree["idle"]]
    for _ in range(100):
        if "idle" not in _tree(server.pid):
            break
        time.sleep(0.05)
    left = _tree(server.pid)
    assert set(left) == {"busy", "worker"}  # a daemon with a worker is busy: kept
    assert outside.poll() is None  # another server's daemon is not this reaper's
    assert reaper.reap(now=100) == []
