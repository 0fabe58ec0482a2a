"""The long form of ``tests/server/test_long_lived_server.py`` (issue 58): 200 streaming
queries started and stopped one after another on a server started as ``spark-cdc serve``
starts it (``start_local_server``'s defaults, its own server beside the bench's), then the
server's Python processes and their memory five minutes after the last stopped, against
after the first. Each query reads a small Delta table's change feed with update detection
into the ``noop`` sink until it has taken everything.

The headline is the count five minutes later ÷ the count after the first query (target
≤ 1.1); the medians hold the counts and the resident memory in MB at the three points.
"""

from __future__ import annotations

import time

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
    source = str(bench.folder("long_lived") / "orders")
    write_deltalake(source, pa.table({"id": [1, 2, 3]}), mode="overwrite")
    server = start_local_server(log_path=bench.folder("long_lived") / "server.log")
    try:
        session = connect(server.url)
        try:
            first, grown = streams_come_and_go(session, source, queries, server.process.pid)
            time.sleep(later)
            after = python_processes_below(server.process.pid)
        finally:
            session.stop()
    finally:
        server.stop()
    ratio = after[0] / first[0]
    points = {"after the first": first, f"after {queries}": grown, f"{later} s later": after}
    return [
        Figure(
            benchmark="long_lived",
            case=f"{queries} streaming queries started and stopped on a spark-cdc serve server",
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
    ]
