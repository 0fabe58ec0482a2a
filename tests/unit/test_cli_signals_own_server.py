"""``serve`` with a server of its own stops cleanly on every stop signal, ``demo`` on one, and
a signal while the server starts leaves nothing running (no harness server: each starts its
own). The commands on the harness server, and why every signal, are in
tests/server/test_cli_signals.py."""

from __future__ import annotations

import signal

import pytest
from spark_cdc.testing.local_server import free_port

from tests.support.processes import Command
from tests.support.stopping import SIGNALS, assert_clean, leftovers, started_server, stop


@pytest.mark.local_process
@pytest.mark.parametrize("name", SIGNALS)
def test_serve_stops_its_server_on_each_signal(name: str, commands: list[Command]) -> None:
    serve = Command("serve", "--port", str(free_port()))
    commands.append(serve)
    serve.wait_for("Connect with:")
    servers = started_server(serve)
    code, _ = stop(serve, SIGNALS[name])
    assert_clean(serve, code, servers)


@pytest.mark.local_process
def test_demo_with_its_own_server_stops_on_a_signal(commands: list[Command]) -> None:
    """One signal: every signal takes the same path (``serve``'s test above and ``tail``'s
    in tests/server/test_cli_signals.py send each); what this adds is the demo's own
    cleanup, and each run costs two minutes of CI."""
    demo = Command("demo", "--seconds", "60")
    commands.append(demo)
    demo.wait_for("commit 1 ")
    servers = started_server(demo)
    code, _ = stop(demo, signal.SIGTERM)
    assert_clean(demo, code, servers)
    assert leftovers(demo) == set(), "the demo's table or spool folder was left behind"


@pytest.mark.local_process
def test_a_signal_while_the_server_starts_leaves_nothing_running(
    commands: list[Command],
) -> None:
    tail = Command("tail", "/nowhere", "--row-id", "id")
    commands.append(tail)
    servers = started_server(tail)
    code, _ = stop(tail, signal.SIGTERM)
    assert_clean(tail, code, servers)
    assert "Connect with" not in tail.output and "NOT_A_DELTA_TABLE" not in tail.output
