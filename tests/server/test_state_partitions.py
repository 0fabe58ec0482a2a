"""A stateful stream of ours on a server left at Spark's 200 shuffle partitions gets as many
as the server can use; a value anyone set, and a checkpoint's, are kept
(``spark_cdc.state_partitions``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.connect.session import SparkSession as ConnectSession
from spark_cdc import ChangelogSpec, post_process
from spark_cdc.rewrite.server_code import server_parallelism
from spark_cdc.server_plugin.changefeed.sample_changelog import register
from spark_cdc.state_partitions import SHUFFLE_PARTITIONS

from tests.support.feeds import collect_rows, feed, row

ID = ChangelogSpec(row_id=["id"])
NET = {"computeUpdates": True, "deduplicationMode": "netChanges"}
UPDATES = {"computeUpdates": True}


def _commits(count: int) -> list[list[dict]]:
    """Commit v updates row v % 4, carries row (v + 1) % 4 over and inserts row 100 + v."""
    commits = [[row(i, "v0", "insert", 0) for i in range(4)]]
    for v in range(1, count):
        updated, carried = v % 4, (v + 1) % 4
        commits.append(
            [
                row(updated, f"v{v - 1}", "delete", v),
                row(updated, f"v{v}", "insert", v),
                row(carried, "same", "delete", v),
                row(carried, "same", "insert", v),
                row(100 + v, "x", "insert", v),
            ]
        )
    return commits


@pytest.fixture
def session(spark: SparkSession, spark_remote: str) -> Iterator[SparkSession]:
    """A session of its own, on which nobody set the shuffle partitions: as on a server
    left at Spark's defaults (the harness server sets 4; unset, the session has Spark's
    200). The harness session gets PySpark's default and active slots back afterwards."""
    own = SparkSession.builder.remote(spark_remote).create()
    register(own)
    own.conf.unset(SHUFFLE_PARTITIONS)
    yield own
    own.stop()
    ConnectSession._set_default_and_active_session(spark)  # type: ignore[arg-type]


def _run(stream: DataFrame, out: Path, checkpoint: Path) -> None:
    """The stream into Parquet files under ``checkpoint``, until it has taken everything."""
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def _recorded(checkpoint: Path) -> set[str]:
    """The shuffle partitions every offset log entry records for the query."""
    entries = (checkpoint / "offsets").iterdir()
    metadata = [json.loads(e.read_text().splitlines()[1]) for e in entries if e.name.isdigit()]
    return {m["conf"][SHUFFLE_PARTITIONS] for m in metadata}


def _state_layout(checkpoint: Path) -> list[int]:
    """The partitions the state of the query's stateful operator is laid out in."""
    return sorted(int(p.name) for p in (checkpoint / "state" / "0").iterdir() if p.name.isdigit())


@pytest.mark.parametrize("options", [UPDATES, NET], ids=["updates", "net-changes"])
def test_a_stream_on_sparks_default_gets_twice_the_servers_parallelism(
    session: SparkSession, tmp_path: Path, options: dict
) -> None:
    commits = _commits(6)
    expected = collect_rows(post_process(feed(session, [], commits=commits), ID, options))
    # One micro-batch: a stream's net changes are each micro-batch's, a batch read's the range's.
    whole = feed(session, [], commits=commits, streaming=True, commits_per_batch=len(commits))
    stream = post_process(whole, ID, options)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    _run(stream, out, checkpoint)
    chosen = 2 * server_parallelism(session)
    assert chosen < 200
    assert _recorded(checkpoint) == {str(chosen)}
    assert _state_layout(checkpoint) == list(range(chosen))
    assert session.conf.get(SHUFFLE_PARTITIONS, None) is None  # the session is as it was
    assert collect_rows(session.read.parquet(str(out))) == expected


def test_a_value_someone_set_is_kept(session: SparkSession, tmp_path: Path) -> None:
    session.conf.set(SHUFFLE_PARTITIONS, "3")
    stream = post_process(feed(session, [], commits=_commits(3), streaming=True), ID, UPDATES)
    checkpoint = tmp_path / "checkpoint"
    _run(stream, tmp_path / "out", checkpoint)
    assert _recorded(checkpoint) == {"3"}
    assert _state_layout(checkpoint) == [0, 1, 2]
    assert session.conf.get(SHUFFLE_PARTITIONS) == "3"


def test_a_stream_started_before_keeps_its_checkpoints_partitions(
    session: SparkSession, tmp_path: Path
) -> None:
    """A stream first run at 7 partitions (as one started before this package chose any,
    at whatever the session had) and restarted on Spark's defaults keeps 7: its state is
    laid out in 7, and no change is lost or doubled across the restart."""
    commits = _commits(8)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    session.conf.set(SHUFFLE_PARTITIONS, "7")
    first = post_process(feed(session, [], commits=commits[:4], streaming=True), ID, UPDATES)
    _run(first, out, checkpoint)
    session.conf.unset(SHUFFLE_PARTITIONS)
    again = post_process(feed(session, [], commits=commits, streaming=True), ID, UPDATES)
    _run(again, out, checkpoint)
    assert _recorded(checkpoint) == {"7"}
    assert _state_layout(checkpoint) == list(range(7))
    expected = collect_rows(post_process(feed(session, [], commits=commits), ID, UPDATES))
    assert collect_rows(session.read.parquet(str(out))) == expected
