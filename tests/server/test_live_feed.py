"""The live feed behind ``spark-cdc tail`` and ``demo``: every commit once, in order, whatever
the gaps between commits, their size and how often the client looks.

Spark reports an idle progress event (the *next* batch id, no input rows, before that batch
has run) after ``spark.sql.streaming.noDataProgressEventInterval`` without data: 10 s by
default, lowered here so that gaps on both sides of it take seconds. The command line's own
test (``test_cli``) runs a gap over the default.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession
from spark_cdc import ChangelogReader
from spark_cdc.cli.live_feed import CommitChanges, LiveFeed

from tests.support.delta_tables import rows

IDLE_INTERVAL_MS = 600
OPTIONS = {"rowId": "id", "computeUpdates": True, "startingVersion": 0}


@pytest.fixture
def idle_soon(spark: SparkSession) -> Iterator[SparkSession]:
    key = "spark.sql.streaming.noDataProgressEventInterval"
    spark.conf.set(key, str(IDLE_INTERVAL_MS))
    try:
        yield spark
    finally:
        spark.conf.unset(key)


def follow_while(feed: LiveFeed, write: Any, poll_s: float) -> list[CommitChanges]:
    """Run ``write()`` on this thread between polls of ``feed`` every ``poll_s`` seconds,
    then take what is left; every commit the feed gave, in the order it gave them."""
    seen: list[CommitChanges] = []

    def poll() -> None:
        feed.check()
        for commits in feed.batches():
            seen.extend(commits)

    feed.start()
    try:
        for pause in write():
            end = time.monotonic() + pause
            while time.monotonic() < end:
                poll()
                time.sleep(min(poll_s, max(end - time.monotonic(), 0)))
        feed.query.processAllAvailable()
        poll()
    finally:
        assert feed.stop(30)
    return seen


def expected(spark: SparkSession, path: str, options: dict[str, Any]) -> dict[int, list[Any]]:
    """Each commit's post-processed rows as a batch read of the whole range gives them."""
    batch = ChangelogReader(spark).options(**options).changes(path).collect()
    by_version: dict[int, list[Any]] = {}
    for row in batch:
        by_version.setdefault(row["_commit_version"], []).append(row)
    return by_version


def as_sorted(rows_: list[Any]) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in rows_)


def check_exact(spark: SparkSession, path: str, seen: list[CommitChanges]) -> None:
    versions = [c.version for c in seen]
    last = DeltaTable(path).version()
    assert versions == list(range(last + 1)), f"commits given: {versions}"
    want = expected(spark, path, OPTIONS)
    for commit in seen:
        assert as_sorted(commit.rows) == as_sorted(want.get(commit.version, [])), commit.version


def feed_of(spark: SparkSession, path: str, work: Path) -> LiveFeed:
    raw, spec, cdc = ChangelogReader(spark, streaming=True).options(**OPTIONS).source_feed(path)
    return LiveFeed(raw, spec, cdc, work_dir=str(work))


def test_quiet_gaps_longer_and_shorter_than_the_idle_interval(
    idle_soon: SparkSession, tmp_path: Path
) -> None:
    """One-row commits after gaps of 3 idle intervals and of a sixth of one, alternating,
    and a 100k-row commit after a long gap: each arrives once, with its rows."""
    path = str(tmp_path / "t")
    write_deltalake(path, rows(range(3)))
    long, short = 3 * IDLE_INTERVAL_MS / 1000, IDLE_INTERVAL_MS / 6000

    def write() -> Iterator[float]:
        yield long  # the first micro-batch runs and the stream goes idle
        for i, gap in enumerate([long, short, long, short]):
            write_deltalake(path, rows([10 + i]), mode="append")
            yield gap
        write_deltalake(path, rows(range(1000, 101_000)), mode="append")
        yield long
        DeltaTable(path).update({"amount": "-1.0"}, predicate="id = 11")
        yield short

    seen = follow_while(feed_of(idle_soon, path, tmp_path / "live"), write, poll_s=0.2)
    check_exact(idle_soon, path, seen)
    assert [c.raw_changes for c in seen][-2:] == [100_000, 2]  # the update: delete + insert


def test_a_slow_reader_misses_nothing(idle_soon: SparkSession, tmp_path: Path) -> None:
    """Commits every 0.2 s, the client looking every 2.5 s: many micro-batches wait in the
    spool at each look, and all of them come out, in order."""
    path = str(tmp_path / "t")
    write_deltalake(path, rows(range(3)))

    def write() -> Iterator[float]:
        yield 2.0
        for i in range(12):
            write_deltalake(path, rows([100 + i]), mode="append")
            yield 0.2
        yield 2.0

    seen = follow_while(feed_of(idle_soon, path, tmp_path / "live"), write, poll_s=2.5)
    check_exact(idle_soon, path, seen)


def test_an_unreadable_micro_batch_stops_the_feed(spark: SparkSession, tmp_path: Path) -> None:
    """A finished micro-batch whose file cannot be read is an error, not a skipped commit."""
    path = str(tmp_path / "t")
    write_deltalake(path, rows(range(3)))
    feed = feed_of(spark, path, tmp_path / "live").start()
    try:
        feed.query.processAllAvailable()
        broken = tmp_path / "live" / "spool" / "spark_cdc_batch=0" / "part-0.parquet"
        broken.write_bytes(b"not parquet")
        with pytest.raises(Exception, match=r"(?i)parquet"):
            list(feed.batches())
    finally:
        assert feed.stop(30)
