"""Every command stops cleanly on every stop signal, every time.

Ctrl-C (SIGINT), SIGTERM (what supervisors, containers and ``systemctl stop`` send) and
SIGHUP (a closed terminal) stop ``tail``, ``demo`` and ``serve`` within a bound, with exit
code 0 and no traceback, leaving no Spark Connect server process they started and no
spool or temporary folder. Signals arrive while micro-batches run (a writer keeps
committing), and each case repeats, so that a hang seen once in a few runs does not hide.

The commands that start a server of their own (``serve``, ``demo`` without ``--remote``) are
in tests/unit/test_cli_signals_own_server.py.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import write_deltalake

from tests.support.delta_tables import committing, rows
from tests.support.processes import Command
from tests.support.stopping import EXIT_BOUND_S, SIGNALS, assert_clean, leftovers, stop

ROUNDS = 1  # a round per signal: each stops the same handler at a random point (CI time)
FROM_ZERO = ("--row-id", "id", "--starting-version", "0")


@pytest.fixture
def writing(tmp_path: Path) -> Iterator[str]:
    """A Delta table that gets a commit every 0.3 s while the test runs."""
    path = str(tmp_path / "orders")
    write_deltalake(path, rows(range(3)))
    with committing(lambda step: write_deltalake(path, rows([3 + step]), mode="append")):
        yield path


@pytest.mark.parametrize("name", SIGNALS)
def test_tail_stops_on_each_signal_while_batches_run(
    spark_remote: str, writing: str, name: str, commands: list[Command]
) -> None:
    for _ in range(ROUNDS):
        tail = Command("tail", writing, *FROM_ZERO, "--remote", spark_remote)
        commands.append(tail)
        tail.wait_for("commit 1 ")
        time.sleep(random.uniform(0, 1.5))  # somewhere inside the next micro-batches
        code, took = stop(tail, SIGNALS[name])
        assert_clean(tail, code, set())
        assert leftovers(tail) == set(), "the spool folder was left behind"
        assert took < EXIT_BOUND_S


def test_a_second_signal_stops_at_once(
    spark_remote: str, writing: str, commands: list[Command]
) -> None:
    tail = Command("tail", writing, *FROM_ZERO, "--remote", spark_remote)
    commands.append(tail)
    tail.wait_for("commit 1 ")
    os.killpg(tail.process.pid, signal.SIGINT)
    time.sleep(0.05)
    code, took = stop(tail, signal.SIGINT)
    assert code == 0 and took < 10, tail.output
    assert "Traceback" not in tail.output


def test_a_stop_signal_started_ignored_stays_ignored(
    spark_remote: str, writing: str, commands: list[Command]
) -> None:
    """Under ``nohup`` (SIGHUP ignored) a closed terminal does not stop ``tail``: it goes on
    reporting commits, and SIGTERM still stops it cleanly."""
    tail = Command("tail", writing, *FROM_ZERO, "--remote", spark_remote, under=("nohup",))
    commands.append(tail)
    tail.wait_for("commit 1 ")
    os.killpg(tail.process.pid, signal.SIGHUP)
    seen = sum("commit " in line for line in tail.lines)
    deadline = time.monotonic() + 120
    while sum("commit " in line for line in tail.lines) <= seen + 1:
        assert tail.process.poll() is None, f"SIGHUP under nohup stopped it:\n{tail.output}"
        assert time.monotonic() < deadline, f"no commit reported after SIGHUP:\n{tail.output}"
        time.sleep(0.2)
    code, took = stop(tail, signal.SIGTERM)
    assert_clean(tail, code, set())
    assert took < EXIT_BOUND_S
