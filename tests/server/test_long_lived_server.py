"""A server ``spark-cdc serve`` starts stays lean however many streams come and go: five
minutes after the last of many streaming queries stopped, its Python processes and their
memory are back within a tenth of what they were after the first (issue 58;
``spark_cdc.testing.idle_daemons``, at ``spark-cdc serve``'s defaults)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from deltalake import write_deltalake
from spark_cdc import readStream
from spark_cdc.connection import connect
from spark_cdc.testing.local_server import start_local_server

from tests.support.delta_tables import rows

WITHIN_S = 300  # after the last query stopped
QUERIES, LONG_QUERIES = 20, 200


def _python_processes(root: int) -> tuple[int, int]:
    """How many Python processes run below ``root``, and their resident memory in bytes."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    count, rss, todo = 0, 0, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            if b"python" in Path(f"/proc/{pid}/cmdline").read_bytes():
                rss += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * 4096
                count += 1
        except (OSError, ValueError):
            continue
    return count, rss


@pytest.mark.local_process
@pytest.mark.timeout(1800)
def test_python_processes_come_back_after_many_streams(tmp_path: Path, long_run: bool) -> None:
    source = str(tmp_path / "orders")
    write_deltalake(source, rows(range(3)))
    server = start_local_server(log_path=tmp_path / "server.log", driver_memory="2g")
    session = connect(server.url)
    try:

        def one_stream() -> None:
            feed = readStream(session).option("rowId", "id").option("startingVersion", 0)
            query = feed.load(source).writeStream.format("noop").start()
            query.processAllAvailable()
            query.stop()

        one_stream()
        first = _python_processes(server.process.pid)
        for _ in range((LONG_QUERIES if long_run else QUERIES) - 1):
            one_stream()
        grown = _python_processes(server.process.pid)
        assert grown[0] > first[0], "the streams started no Python process: nothing to show"
        deadline = time.monotonic() + WITHIN_S
        now = grown
        while (now[0] > first[0] * 1.1 or now[1] > first[1] * 1.1) and time.monotonic() < deadline:
            time.sleep(5)
            now = _python_processes(server.process.pid)
        print(f"Python processes (count, RSS): first {first}, grown {grown}, then {now}")
        assert now[0] <= first[0] * 1.1 and now[1] <= first[1] * 1.1, (first, grown, now)
    finally:
        session.stop()
        server.stop()
