"""A server ``spark-cdc serve`` starts stays lean however many streams come and go: five
minutes after the last of many streaming queries stopped, its Python processes and their
memory are back within a tenth of what they were after the first (issue 58;
``spark_cdc.testing.idle_daemons``). The long run (``--long``) keeps ``spark-cdc serve``'s
defaults; the everyday run stops daemons idle for 30 s instead of 120 s, the same reaper
sooner, so CI does not spend two minutes of a worker waiting."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from deltalake import write_deltalake
from spark_cdc.connection import connect
from spark_cdc.testing.idle_daemons import DEFAULT_IDLE_SECONDS
from spark_cdc.testing.local_server import start_local_server

from tests.support.delta_tables import rows
from tests.support.processes import python_processes_below, streams_come_and_go

WITHIN_S = 300  # after the last query stopped
QUERIES, LONG_QUERIES = 10, 200
IDLE_S = 30.0  # the everyday run's idle time


@pytest.mark.local_process
@pytest.mark.timeout(1800)
def test_python_processes_come_back_after_many_streams(tmp_path: Path, long_run: bool) -> None:
    source = str(tmp_path / "orders")
    write_deltalake(source, rows(range(3)))
    server = start_local_server(
        log_path=tmp_path / "server.log",
        driver_memory="2g",
        idle_daemon_seconds=DEFAULT_IDLE_SECONDS if long_run else IDLE_S,
    )
    session = connect(server.url)
    try:
        count = LONG_QUERIES if long_run else QUERIES
        first, grown = streams_come_and_go(session, source, count, server.process.pid)
        assert grown[0] > first[0], "the streams started no Python process: nothing to show"
        deadline = time.monotonic() + WITHIN_S
        now = grown
        while (now[0] > first[0] * 1.1 or now[1] > first[1] * 1.1) and time.monotonic() < deadline:
            time.sleep(5)
            now = python_processes_below(server.process.pid)
        print(f"Python processes (count, RSS): first {first}, grown {grown}, then {now}")
        assert now[0] <= first[0] * 1.1 and now[1] <= first[1] * 1.1, (first, grown, now)
    finally:
        session.stop()
        server.stop()
