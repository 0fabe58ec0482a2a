"""The long form of ``tests/server/test_long_lived_server.py`` (issue 58): 200 streaming
queries started and stopped one after another, on a server started as ``spark-cdc serve``
starts it (``start_local_server``'s defaults, its own server beside the bench's) and on the
server container (where a Docker engine runs), then the server's Python processes and their
memory five minutes after the last stopped, against after the first. Each query reads a
small Delta table's change feed with update detection into the ``noop`` sink until it has
taken everything. Both servers run the same reaper (``spark_cdc.testing.idle_daemons``):
the container's entry point starts it beside its server.

The headline is the count five minutes later ÷ the count after the first query (target
≤ 1.1); the medians hold the counts and the resident memory in MB at the three points.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake
from spark_cdc.connection import connect
from spark_cdc.testing.local_server import start_local_server

from tests.bench.common import Bench, Figure
from tests.support.processes import python_processes_below, streams_come_and_go

QUERIES, QUICK_QUERIES = 200, 5
LATER_S, QUICK_LATER_S = 300, 30


def run(bench: Bench) -> list[Figure]:
    queries, later = (QUICK_QUERIES, QUICK_LATER_S) if bench.quick else (QUERIES, LATER_S)
    folder = bench.folder("long_lived")
    source = str(folder / "orders")
    write_deltalake(source, pa.table({"id": [1, 2, 3]}), mode="overwrite")
    figures = [_measure("a spark-cdc serve server", _serve(folder), source, queries, later)]
    if shutil.which("docker") is None:
        figures.append(_not_measured("no Docker engine here"))
    else:
        figures.append(_measure("the server container", _container(folder), source, queries, later))
    return figures


@contextmanager
def _serve(folder: Path) -> Iterator[tuple[str, int]]:
    """A server as ``spark-cdc serve`` starts it: its address, and its process id."""
    server = start_local_server(log_path=folder / "server.log")
    try:
        yield server.url, server.process.pid
    finally:
        server.stop()


@contextmanager
def _container(folder: Path) -> Iterator[tuple[str, int]]:
    """The server container sharing ``folder``: its address, and the process id its entry
    point has on this machine (the server and the reaper run below it)."""
    from spark_cdc.testing.container import SparkConnectContainer

    container = SparkConnectContainer(shared=[folder]).start()
    try:
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        yield container.url, int(wrapped.attrs["State"]["Pid"])
    finally:
        container.stop()


def _measure(
    where: str,
    server: AbstractContextManager[tuple[str, int]],
    source: str,
    queries: int,
    later: float,
) -> Figure:
    with server as (url, root):
        session = connect(url)
        try:
            first, grown = streams_come_and_go(session, source, queries, root)
            time.sleep(later)
            after = python_processes_below(root)
        finally:
            session.stop()
    ratio = after[0] / first[0]
    points = {"after the first": first, f"after {queries}": grown, f"{later} s later": after}
    return Figure(
        benchmark="long_lived",
        case=f"{queries} streaming queries started and stopped on {where}",
        ratio_label="Python processes later ÷ after the first",
        ratio=round(ratio, 3),
        target="≤ 1.1",
        met=ratio <= 1.1 and after[1] <= first[1] * 1.1,
        medians={
            **{f"processes {name}": count for name, (count, _) in points.items()},
            **{f"MB {name}": round(rss / 2**20) for name, (_, rss) in points.items()},
        },
        notes="resident memory must be within the same tenth for the target to be met",
    )


def _not_measured(why: str) -> Figure:
    return Figure(
        benchmark="long_lived",
        case="streaming queries started and stopped on the server container",
        ratio_label="Python processes later ÷ after the first",
        ratio=None,
        target="≤ 1.1",
        notes=f"not measured: {why}",
    )
