"""A feed breaking the timestamp contract fails the query loudly instead of losing rows.

Spark drops rows at or below the watermark without an error; the client watches the
progress of every stream holding a rewrite and turns the first drop into
``CHANGELOG_CONTRACT_VIOLATION.ROWS_BEHIND_WATERMARK``.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from spark_cdc import ChangelogSpec, late_rows, post_process
from spark_cdc.late_rows import ROWS_BEHIND_WATERMARK, WatchedQuery

from tests.support.feeds import BASE_TIME, collect_rows, expect, feed, row

ID = ChangelogSpec(row_id=["id"])


def _at(seconds: int, r: dict[str, Any]) -> dict[str, Any]:
    return {**r, "_commit_timestamp": BASE_TIME + timedelta(seconds=seconds)}


# Version 3 carries a timestamp below version 2's: once version 2 has moved the watermark,
# Spark drops version 3's row.
ON_TIME = [_at(10, row(1, "a", "insert", 1)), _at(20, row(2, "b", "insert", 2))]
LATE = [_at(5, row(3, "c", "insert", 3))]


def _start(spark: SparkSession, query_name: str) -> Any:
    stream = post_process(feed(spark, ON_TIME + LATE, streaming=True), ID, {})
    return stream.writeStream.format("memory").queryName(query_name).start()


@pytest.mark.drops_late_rows
def test_a_row_behind_the_watermark_fails_the_wait_and_stops_the_query(
    spark: SparkSession, query_name: str
) -> None:
    query = _start(spark, query_name)
    assert isinstance(query, WatchedQuery)
    with pytest.raises(StreamingQueryException) as failure:
        query.processAllAvailable()
    assert failure.value.getCondition() == ROWS_BEHIND_WATERMARK
    assert str(failure.value).startswith(f"[{ROWS_BEHIND_WATERMARK}] Micro-batch "), "one prefix"
    assert "dropped 1 row(s)" in str(failure.value)
    assert not query.isActive
    assert query.exception() is failure.value
    # What was emitted before the drop stays; the dropped row is reported, not recovered.
    assert collect_rows(spark.table(query_name)) == expect(ON_TIME)


@pytest.mark.drops_late_rows
def test_a_query_nobody_polls_is_stopped_by_the_listener(
    spark: SparkSession, query_name: str
) -> None:
    query = _start(spark, query_name)
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(240)  # returns only because the listener stopped the query
    assert failure.value.getCondition() == ROWS_BEHIND_WATERMARK
    assert not query.isActive


def test_a_feed_keeping_the_contract_is_not_disturbed(spark: SparkSession, query_name: str) -> None:
    on_time = [*ON_TIME, _at(30, row(3, "c", "insert", 3))]
    stream = post_process(feed(spark, on_time, streaming=True), ID, {})
    query = stream.writeStream.format("memory").queryName(query_name).start()
    query.processAllAvailable()
    assert query.exception() is None
    query.stop()
    assert collect_rows(spark.table(query_name)) == expect(on_time)


def test_streams_without_a_rewrite_are_not_watched(spark: SparkSession, query_name: str) -> None:
    stream = feed(spark, ON_TIME, streaming=True)
    query = stream.writeStream.format("memory").queryName(query_name).start()
    assert not isinstance(query, WatchedQuery)
    query.stop()


SCRIPT = """
import sys
from deltalake import write_deltalake
import pyarrow as pa
from pyspark.sql import SparkSession
from spark_cdc import ChangelogReader

remote, path, checkpoint = sys.argv[1:]
write_deltalake(path, pa.table({"id": [1, 2], "v": ["a", "b"]}))
spark = SparkSession.builder.remote(remote).create()
df = ChangelogReader(spark, streaming=True).options(rowId="id", computeUpdates=True).changes(path)
query = df.writeStream.format("noop").option("checkpointLocation", checkpoint).start()
query.processAllAvailable()
query.stop()
"""


def test_a_script_that_ends_right_after_stop_prints_no_warning(
    spark_remote: str, tmp_path: Path
) -> None:
    """The watch's listener is gone when ``stop()`` returns, so an interpreter that exits
    right after has nothing left to remove (pyspark warned "cannot schedule new futures
    after shutdown" twice when the removal was left to the listener bus)."""
    for attempt in range(3):  # the bus's event and stop() race: either may come first
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                SCRIPT,
                spark_remote,
                str(tmp_path / f"t{attempt}"),
                str(tmp_path / f"cp{attempt}"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "Warning" not in done.stderr, done.stderr


def test_stop_returns_while_the_listener_bus_holds_an_undelivered_event(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Removing the last listener while an event waits for delivery hung PySpark's bus
    forever (SPARK-59623; a CI run's ``stop()`` waited 900 s). Our listener is slowed on
    its first event so that later events queue up behind it, then the query is stopped."""
    delivering = threading.Event()
    on_progress = late_rows._DropListener.onQueryProgress

    def slow_first_progress(self: Any, event: Any) -> None:
        on_progress(self, event)
        if not delivering.is_set():
            delivering.set()
            time.sleep(2)  # events keep arriving meanwhile

    monkeypatch.setattr(late_rows._DropListener, "onQueryProgress", slow_first_progress)
    rate = spark.readStream.format("rate").option("rowsPerSecond", 1000).load()
    query = rate.writeStream.format("noop").trigger(processingTime="0 seconds").start()
    watched = late_rows.watch(query)
    assert delivering.wait(120), "the query reported no progress"
    time.sleep(0.5)
    stopping = threading.Thread(target=watched.stop, daemon=True)
    stopping.start()
    stopping.join(timeout=120)
    assert not stopping.is_alive(), "stop() hung removing the listener"
    assert not query.isActive
    assert late_rows._DropListener not in {type(x) for x in spark.streams._sqlb._listener_bus}
