"""Stopping a command by signal and checking it stopped cleanly: exit 0, no traceback, none
of the Spark Connect servers it started still running, no temporary folder left behind."""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.support.processes import Command

SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP}
EXIT_BOUND_S = 90  # two 20 s deadlines (stream, session) and the server's stop, with margin


# What a server's command line holds: its class, or (sharing its Python workers) the driver
# program that starts Spark's Connect plugin.
_SERVER_MARKS = (b"SparkConnectServer", b"shared_workers_server")


def servers_of(command: Command) -> set[int]:
    """The Spark Connect server processes ``command`` started: the launcher runs
    spark-submit, which becomes the server's JVM, as a child of the command."""
    found = set()
    for status in glob.glob("/proc/[0-9]*/status"):
        try:
            text = Path(status).read_text()
            args = Path(status).with_name("cmdline").read_bytes()
        except OSError:
            continue
        parent = next(
            (line.split()[1] for line in text.splitlines() if line.startswith("PPid:")), ""
        )
        if parent == str(command.process.pid) and any(m in args for m in _SERVER_MARKS):
            found.add(int(status.split("/")[2]))
    return found


def process_group(group: int) -> set[int]:
    """The processes of process group ``group`` (a server's: the JVM and its Python
    workers), from ``/proc``."""
    found = set()
    for stat in glob.glob("/proc/[0-9]*/stat"):
        with contextlib.suppress(OSError):
            if Path(stat).read_text().rsplit(")", 1)[1].split()[2] == str(group):
                found.add(int(stat.split("/")[2]))
    return found


def alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if Path(f"/proc/{pid}").exists()}


def leftovers(command: Command) -> set[str]:
    """The temporary folders ``command`` left in its own ``TMPDIR`` (the log folder of a
    server it started aside: kept on purpose)."""
    return {p.name for p in command.tmp.glob("spark-cdc-*") if "spark-cdc-server-" not in p.name}


def stop(command: Command, signum: int) -> tuple[int, float]:
    """Send ``signum`` to the command's process group, as a terminal or supervisor does."""
    started = time.monotonic()
    with contextlib.suppress(ProcessLookupError):  # it may have finished already
        os.killpg(command.process.pid, signum)
    try:
        code = command.process.wait(EXIT_BOUND_S)
    except subprocess.TimeoutExpired:
        os.killpg(command.process.pid, signal.SIGKILL)
        raise AssertionError(f"no exit {EXIT_BOUND_S}s after {signum}:\n{command.output}") from None
    command._reader.join(10)
    return code, time.monotonic() - started


def assert_clean(command: Command, code: int, servers: set[int]) -> None:
    """Exit 0, no traceback, and none of ``servers`` (the ones it started) still running."""
    assert code == 0, command.output
    assert "Traceback" not in command.output, command.output
    assert "Exception ignored" not in command.output, command.output
    deadline = time.monotonic() + 30  # a killed JVM may take a moment to be reaped
    while (left := alive(servers)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"servers left running: {left}"


def started_server(command: Command, timeout: float = 120) -> set[int]:
    deadline = time.monotonic() + timeout
    while not (servers := servers_of(command)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert servers, f"no server seen starting:\n{command.output}"
    return servers
