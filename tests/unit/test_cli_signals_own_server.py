"""``serve`` with a server of its own stops cleanly on every stop signal, ``demo`` on one, and
a signal while the server starts leaves nothing running (no harness server: each starts its
own). The commands on the harness server, and why every signal, are in
tests/server/test_cli_signals.py."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from deltalake import write_deltalake
from spark_cdc.testing.local_server import free_port, port_is_free

from tests.support.delta_tables import rows
from tests.support.processes import Command
from tests.support.stopping import (
    SIGNALS,
    alive,
    assert_clean,
    leftovers,
    process_group,
    started_server,
    stop,
)

WITHIN_S = 30  # issue 58: nothing of the server left this long after its command was killed


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


def _killed_leaves_nothing(command: Command, ready: str) -> None:
    """SIGKILL ``command`` once it printed ``ready``: no handler of its own runs. Within
    ``WITHIN_S`` no process of its server remains, nothing listens on the server's port, and
    its temporary folder (the server's log in it) is gone: the watchdog removed it."""
    command.wait_for(ready)
    (server,) = started_server(command)
    members = process_group(server)
    port = int(
        Path(f"/proc/{server}/cmdline").read_bytes().split(b"binding.port=")[1].split(b"\0")[0]
    )
    assert not port_is_free(port)
    assert list(command.tmp.glob("spark-cdc-*")) != []
    os.kill(command.process.pid, signal.SIGKILL)
    deadline = time.monotonic() + WITHIN_S

    def folders() -> list[str]:
        return [path.name for path in command.tmp.glob("spark-cdc-*")]

    while (alive(members) or not port_is_free(port) or folders()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not alive(members), f"left running {WITHIN_S} s after the kill: {alive(members)}"
    assert port_is_free(port)
    assert folders() == [], f"left behind {WITHIN_S} s after the kill"


@pytest.mark.local_process
def test_serve_killed_leaves_no_server_behind(commands: list[Command]) -> None:
    serve = Command("serve", "--port", str(free_port()))
    commands.append(serve)
    _killed_leaves_nothing(serve, "Connect with:")


@pytest.mark.local_process
def test_apply_killed_leaves_no_server_behind(tmp_path: Path, commands: list[Command]) -> None:
    source = str(tmp_path / "orders")
    write_deltalake(source, rows(range(3)))
    target = str(tmp_path / "mirror")
    apply = Command("apply", source, "--target", target, "--keys", "id")
    commands.append(apply)
    _killed_leaves_nothing(apply, "Applying the changes")
