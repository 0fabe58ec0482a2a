"""apply_changes when the server dies: kill -9 of the server (the container, when the harness
runs one) while streams apply micro-batches to Delta and Iceberg targets and a writer keeps
committing to the source, then a new server resumes from the same checkpoint. Each target
must equal the model of the source's whole change feed: no change lost, none applied twice,
whatever the kill interrupted (a micro-batch's read, its target commit, the state commit
after it). And nothing of a killed server keeps running."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from pyspark.sql import SparkSession
from spark_cdc import apply_changes, readStream

from tests.support.apply_targets import (
    feed_changes,
    model_rows,
    read_iceberg,
    read_table,
    sorted_rows,
)
from tests.support.harness import TEST_SERVER_CONF, dedicated_session
from tests.support.iceberg_tables import catalog_properties, sql_catalog
from tests.support.writer import TableWriter

# The streams one kill interrupts: a Delta target of each SCD type, and an Iceberg one of each
# (a catalog on SQLite beside them).
STREAMS = [("delta", 1), ("delta", 2), ("iceberg", 1), ("iceberg", 2)]


def _started(session: Any, source: str, folder: Path, target_format: str, scd_type: int) -> Any:
    """A stream of micro-batches of up to twenty files: small enough that a kill lands
    inside one, large enough that four streams on one server keep up with the writer (at
    ten files and a commit every 0.25 s, their catch-up after the restart took minutes)."""
    reader = readStream(session).option("rowId", "id").option("computeUpdates", True)
    feed = reader.option("startingVersion", 0).option("maxFilesPerTrigger", 20).load(source)
    return apply_changes(
        feed,
        _target(folder, target_format, scd_type),
        keys=["id"],
        sequence_by="_commit_version",
        stored_as_scd_type=scd_type,
        checkpoint_location=str(folder / f"cp-{target_format}-{scd_type}"),
        format=target_format,
        catalog=catalog_properties(folder) if target_format == "iceberg" else None,
    )


def _target(folder: Path, target_format: str, scd_type: int) -> str:
    if target_format == "iceberg":
        return f"db.mirror_{scd_type}"
    return str(folder / f"mirror-{scd_type}")


def _state_version(folder: Path, target_format: str, scd_type: int) -> int:
    """The state table's commits so far (read from storage: the server is never asked
    anything at the moment it is killed)."""
    target = _target(folder, target_format, scd_type)
    if target_format == "iceberg":
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            state = sql_catalog(folder).load_table(target + "__apply_changes_state")
        except (NoSuchTableError, NoSuchNamespaceError):
            return -1
        return len(state.metadata.snapshots)
    try:
        return int(DeltaTable(target + "__apply_changes_state").version())
    except TableNotFoundError:
        return -1


def _read(folder: Path, target_format: str, scd_type: int) -> pa.Table:
    target = _target(folder, target_format, scd_type)
    if target_format == "delta":
        return read_table(target)
    return read_iceberg(catalog_properties(folder), target)


def _wait_for_applied_batch(
    query: Any,
    folder: Path,
    target_format: str,
    scd_type: int,
    since: int | None = None,
    timeout: float = 300,
) -> None:
    """Until one more batch reached the state table than it had at ``since`` (None: now)."""
    before = _state_version(folder, target_format, scd_type) if since is None else since
    deadline = time.monotonic() + timeout
    while _state_version(folder, target_format, scd_type) <= before:
        assert time.monotonic() < deadline, f"no batch applied within {timeout:.0f}s"
        if not query.isActive:
            raise AssertionError(f"the stream stopped: {query.exception()}")
        time.sleep(0.05)


@pytest.mark.timeout(1800)  # server starts, on a machine that may be shared
@pytest.mark.filterwarnings("ignore:StreamingQueryListenerBus Handler thread:UserWarning")
def test_killed_servers_neither_lose_nor_repeat_a_change(
    spark: SparkSession, tmp_path: Path, long_run: bool, seed: int
) -> None:
    """Both SCD types into both target formats at once, a stream each on the same server:
    one kill interrupts each somewhere else (their batches do not line up), and the
    servers start a quarter as often as with a test per stream."""
    rng = random.Random(seed)
    source = str(tmp_path / "orders")
    kills = 3 if long_run else 1
    # A commit every 1.5 s on average: every commit the streams fall behind by is more work
    # for them, so at a commit every 0.55 s a machine half as fast took the test twice as long
    # (and at 0.9 s, 384 s on a loaded one).
    with TableWriter(source, seed, pause=(1.0, 2.0)) as writer:
        for life in range(kills):
            with dedicated_session(tmp_path, f"server-{life}") as (server, session):
                # All four started, then each waited for: their first batches run at once.
                before = [_state_version(tmp_path, *stream) for stream in STREAMS]
                started = [_started(session, source, tmp_path, *stream) for stream in STREAMS]
                for query, stream, since in zip(started, STREAMS, before, strict=True):
                    _wait_for_applied_batch(query, tmp_path, *stream, since=since)
                time.sleep(rng.uniform(0.0, 1.0))  # in a batch, or between two
                server.kill()  # SIGKILL: the process group, or the container's PID 1
                assert not server.alive()
        with dedicated_session(tmp_path, "server-last") as (server, session):
            queries = [_started(session, source, tmp_path, *stream) for stream in STREAMS]
            writer.wait_for_commits(writer.stats.commits + 3)  # commits after the restart too
            writer.stop()
            for query in queries:
                query.processAllAvailable()
                query.stop()
    versions = [_state_version(tmp_path, *stream) for stream in STREAMS]
    print(f"writer: {writer.stats}; state versions: {versions}")
    feed = feed_changes(spark, source)
    for target_format, scd_type in STREAMS:
        got = sorted_rows(_read(tmp_path, target_format, scd_type))
        assert got == model_rows(feed, scd_type), f"{target_format} type {scd_type}"


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid``, from ``ps``."""
    table = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True)
    children: dict[int, list[int]] = {}
    for line in table.stdout.splitlines():
        child, parent = map(int, line.split())
        children.setdefault(parent, []).append(child)
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie (an ended child whose new parent has not reaped it yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.local_process  # a local server: a container's processes end with it anyway
@pytest.mark.timeout(900)
@pytest.mark.filterwarnings("ignore:StreamingQueryListenerBus Handler thread:UserWarning")
def test_nothing_of_a_server_killed_mid_batch_keeps_running(tmp_path: Path, seed: int) -> None:
    """SIGKILL of the server's JVM alone (not its process group) while an ``apply_changes``
    stream and a streaming net changes read run: every Python process it started ends
    with it (a ``foreachBatch`` worker used to live on for more than ten minutes)."""
    from spark_cdc.testing.local_server import start_local_server

    source = str(tmp_path / "orders")
    server = start_local_server(conf=TEST_SERVER_CONF, log_path=tmp_path / "server.log")
    session = SparkSession.builder.remote(server.url).create()
    try:
        with TableWriter(source, seed, pause=(0.1, 0.4)) as writer:
            query = _started(session, source, tmp_path, "delta", 1)
            net = readStream(session).option("rowId", "id").option("computeUpdates", True)
            net = net.option("deduplicationMode", "netChanges").load(source)
            netting = net.writeStream.format("noop").start()
            _wait_for_applied_batch(query, tmp_path, "delta", 1)
            assert netting.isActive
            workers = _descendants(server.process.pid)
            assert workers, "the server started no process"
            os.kill(server.process.pid, signal.SIGKILL)
            deadline = time.monotonic() + 120
            while (left := {p for p in workers if _running(p)}) and time.monotonic() < deadline:
                time.sleep(1)
            writer.stop()
        assert not left, subprocess.run(
            ["ps", "-o", "pid,args", "-p", ",".join(map(str, left))],
            capture_output=True,
            text=True,
        ).stdout
    finally:
        session.release_session_on_close = False  # the server is gone: nothing to release
        session.stop()
        server.stop()
