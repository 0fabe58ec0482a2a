"""The local server's daemon reaper (``spark_cdc.testing.idle_daemons``) on a real process
tree: a process standing for the server, with two Python worker daemons under it (their
command line is Spark's, ``-m pyspark.daemon``), one of them busy with a worker, and one
more daemon outside the server's tree. Only the server's idle daemon is stopped, and only
once it has been idle for the time given."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from spark_cdc.testing.idle_daemons import IdleDaemonReaper, _running, listening_ports

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


@pytest.mark.local_process
@pytest.mark.timeout(300)
def test_a_stopped_daemons_port_stays_unreachable_and_its_session_gets_a_new_one(
    tmp_path: Path,
) -> None:
    """The hazard CI met: Spark connects again to a stopped daemon's port, and a daemon that
    took it fails Spark's authentication for good. Reaped on a real server, the port cannot
    be bound by anyone else (as the next daemon binds: no SO_REUSEADDR), and the session's
    next Python task runs on a daemon Spark started anew."""
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import udf
    from spark_cdc.testing.local_server import start_local_server

    # Workers not reused: each exits with its task, so the daemon is idle at once (a reused
    # one stays a minute, Spark's own timeout).
    server = start_local_server(
        conf={"spark.python.worker.reuse": "false"},
        log_path=tmp_path / "server.log",
        idle_daemon_seconds=None,
        driver_memory="1g",
    )
    reaper = IdleDaemonReaper(server.process.pid, idle_seconds=1)
    try:
        spark = SparkSession.builder.remote(server.url).create()
        plus_one = udf(lambda x: x + 1, "long")
        assert spark.range(3).select(plus_one("id")).collect()[2][0] == 3
        assert reaper.reap(now=0) == []
        daemons = _daemons_under(server.process.pid)
        ports = [port for pid in daemons for _, port in listening_ports(pid)]
        assert len(ports) == len(daemons) > 0
        assert sorted(reaper.reap(now=1)) == sorted(daemons)
        for pid in daemons:  # exited (a zombie until the JVM waits for it)
            for _ in range(200):
                if not _running(pid):
                    break
                time.sleep(0.05)
        for port in ports:
            taker = socket.socket()
            with pytest.raises(OSError) as taken:
                taker.bind(("127.0.0.1", port))
            taker.close()
            assert taken.value.errno == errno.EADDRINUSE
        assert [row[0] for row in spark.range(3).select(plus_one("id")).collect()] == [1, 2, 3]
        spark.stop()
    finally:
        reaper.stop()
        server.stop()


@pytest.mark.local_process
@pytest.mark.timeout(300)
def test_a_daemon_that_started_a_worker_after_the_reapers_look_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hazard CI met next: the reaper saw a session's daemon without a worker, and by
    the time it stopped it Spark had started a worker there and pooled it. The daemon's end
    took the worker along, and Spark's next task, handed the dead worker from its pool, told
    the gone daemon to stop it: "java.io.IOException: Stream closed", the query failed. The
    reaper is given such a late look (its process listing from before the worker) and must
    keep the daemon, which has a worker when it is stopped."""
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import udf
    from spark_cdc.testing import idle_daemons
    from spark_cdc.testing.local_server import start_local_server

    # Workers reused (Spark's default): the task's worker stays, pooled, under its daemon.
    server = start_local_server(
        log_path=tmp_path / "server.log", idle_daemon_seconds=None, driver_memory="1g"
    )
    reaper = IdleDaemonReaper(server.process.pid, idle_seconds=1)
    try:
        spark = SparkSession.builder.remote(server.url).create()
        plus_one = udf(lambda x: x + 1, "long")
        assert [row[0] for row in spark.range(3).select(plus_one("id")).collect()] == [1, 2, 3]
        daemons = _daemons_under(server.process.pid)
        parents, commands = idle_daemons._processes()
        assert any(parent in daemons for parent in parents.values())  # the pooled worker
        late = {pid: parent for pid, parent in parents.items() if parent not in daemons}
        monkeypatch.setattr(idle_daemons, "_processes", lambda: (late, commands))
        assert reaper.reap(now=0) == []
        assert reaper.reap(now=1) == []
        assert all(_running(pid) for pid in daemons)
        assert [row[0] for row in spark.range(3).select(plus_one("id")).collect()] == [1, 2, 3]
        spark.stop()
    finally:
        reaper.stop()
        server.stop()


def _daemons_under(root: int) -> list[int]:
    """The daemons among ``root``'s children (the server's JVM starts them)."""
    lines = subprocess.run(
        ["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    rows = [line.split(None, 2) for line in lines]
    return [
        int(pid) for pid, parent, args in rows if "pyspark.daemon" in args and int(parent) == root
    ]


def test_listening_ports_names_a_processs_listening_socket() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    connected = socket.create_connection(listener.getsockname())  # not listening: not named
    try:
        assert listening_ports(os.getpid()) == [("127.0.0.1", listener.getsockname()[1])]
    finally:
        connected.close()
        listener.close()
