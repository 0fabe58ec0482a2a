"""Every command stops cleanly on every stop signal, every time.

Ctrl-C (SIGINT), SIGTERM (what supervisors, containers and ``systemctl stop`` send) and
SIGHUP (a closed terminal) stop ``tail``, ``demo`` and ``serve`` within a bound, with exit
code 0 and no traceback, leaving no Spark Connect server process they started and no
spool or temporary folder. Signals arrive while micro-batches run (a writer keeps
committing), and each case repeats: a hang seen once in four runs must not hide.
"""

from __future__ import annotations

import contextlib
import glob
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import write_deltalake
from spark_cdc.testing.local_server import free_port

from tests.server.test_cli import Command
from tests.support.delta_tables import rows

SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP}
EXIT_BOUND_S = 90  # two 20 s deadlines (stream, session) and the server's stop, with margin
ROUNDS = 3
FROM_ZERO = ("--row-id", "id", "--starting-version", "0")


def _servers_of(command: Command) -> set[int]:
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
        if parent == str(command.process.pid) and b"SparkConnectServer" in args:
            found.add(int(status.split("/")[2]))
    return found


def _alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if Path(f"/proc/{pid}").exists()}


@pytest.fixture
def commands() -> Iterator[list[Command]]:
    """Commands a test starts; any still running when it ends (a failed wait) is killed
    with its process group, so no test leaves a stream running on the shared server."""
    started: list[Command] = []
    yield started
    for command in started:
        if command.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(command.process.pid, signal.SIGKILL)


def _leftovers() -> set[str]:
    """The commands' temporary folders (server logs of this suite's own servers aside)."""
    return {p for p in glob.glob("/tmp/spark-cdc-*") if "spark-cdc-server-" not in p}


@pytest.fixture
def writing(tmp_path: Path) -> Iterator[str]:
    """A Delta table that gets a commit every 0.3 s while the test runs."""
    path = str(tmp_path / "orders")
    write_deltalake(path, rows(range(3)))
    done = threading.Event()

    def write() -> None:
        next_id = 3
        while not done.wait(0.3):
            write_deltalake(path, rows([next_id]), mode="append")
            next_id += 1

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    yield path
    done.set()
    writer.join(10)


def _stop(command: Command, signum: int) -> tuple[int, float]:
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


def _assert_clean(command: Command, code: int, servers: set[int]) -> None:
    """Exit 0, no traceback, and none of ``servers`` (the ones it started) still running."""
    assert code == 0, command.output
    assert "Traceback" not in command.output, command.output
    assert "Exception ignored" not in command.output, command.output
    deadline = time.monotonic() + 30  # a killed JVM may take a moment to be reaped
    while (left := _alive(servers)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"servers left running: {left}"


def _started_server(command: Command, timeout: float = 120) -> set[int]:
    deadline = time.monotonic() + timeout
    while not (servers := _servers_of(command)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert servers, f"no server seen starting:\n{command.output}"
    return servers


@pytest.mark.parametrize("name", SIGNALS)
def test_tail_stops_on_each_signal_while_batches_run(
    spark_remote: str, writing: str, name: str, commands: list[Command]
) -> None:
    for _ in range(ROUNDS):
        before = _leftovers()
        tail = Command("tail", writing, *FROM_ZERO, "--remote", spark_remote)
        commands.append(tail)
        tail.wait_for("commit 1 ")
        time.sleep(random.uniform(0, 1.5))  # somewhere inside the next micro-batches
        code, took = _stop(tail, SIGNALS[name])
        _assert_clean(tail, code, set())
        assert _leftovers() <= before, "the spool folder was left behind"
        assert took < EXIT_BOUND_S


@pytest.mark.local_process
@pytest.mark.parametrize("name", SIGNALS)
def test_serve_stops_its_server_on_each_signal(name: str, commands: list[Command]) -> None:
    serve = Command("serve", "--port", str(free_port()))
    commands.append(serve)
    serve.wait_for("Connect with:")
    servers = _started_server(serve)
    code, _ = _stop(serve, SIGNALS[name])
    _assert_clean(serve, code, servers)


@pytest.mark.local_process
@pytest.mark.parametrize("name", SIGNALS)
def test_demo_with_its_own_server_stops_on_each_signal(name: str, commands: list[Command]) -> None:
    before = _leftovers()
    demo = Command("demo", "--seconds", "60")
    commands.append(demo)
    demo.wait_for("commit 1 ")
    servers = _started_server(demo)
    code, _ = _stop(demo, SIGNALS[name])
    _assert_clean(demo, code, servers)
    assert _leftovers() <= before, "the demo's table or spool folder was left behind"


@pytest.mark.local_process
def test_a_signal_while_the_server_starts_leaves_nothing_running(
    commands: list[Command],
) -> None:
    tail = Command("tail", "/nowhere", "--row-id", "id")
    commands.append(tail)
    servers = _started_server(tail)
    code, _ = _stop(tail, signal.SIGTERM)
    _assert_clean(tail, code, servers)
    assert "Connect with" not in tail.output and "NOT_A_DELTA_TABLE" not in tail.output


def test_a_second_signal_stops_at_once(
    spark_remote: str, writing: str, commands: list[Command]
) -> None:
    tail = Command("tail", writing, *FROM_ZERO, "--remote", spark_remote)
    commands.append(tail)
    tail.wait_for("commit 1 ")
    os.killpg(tail.process.pid, signal.SIGINT)
    time.sleep(0.05)
    code, took = _stop(tail, signal.SIGINT)
    assert code == 0 and took < 10, tail.output
    assert "Traceback" not in tail.output
