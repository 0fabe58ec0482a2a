"""A server whose sessions and streaming queries share their Python workers
(``start_local_server(shared_python_workers=True)``, ``spark-cdc serve
--shared-python-workers``, the container's ``SPARK_CDC_SHARED_PYTHON_WORKERS=true``): it
serves what the stock server serves, keeps its token, and a stream started after the first,
in a new session too, starts no Python worker daemon of its own (the stock server starts
three per stream and keeps them)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors.exceptions.connect import SparkConnectGrpcException
from pyspark.sql import SparkSession
from spark_cdc.testing.local_server import LocalServer

from tests.support import harness
from tests.support.apply_targets import (
    feed_changes,
    follow_across_a_restart,
    model_rows,
    read_table,
    sorted_rows,
)

TOKEN = "shared-workers-test-token"
# Prints how many Python worker daemons descend from the process argv[1] (a daemon's forked
# workers carry its command line: only daemons whose parent is none count).
_COUNT_DAEMONS = """
import os, sys
parents, daemon = {}, set()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        command = open(f"/proc/{pid}/cmdline", "rb").read()
        parents[int(pid)] = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        continue
    if b"pyspark.daemon" in command:
        daemon.add(int(pid))
def under(pid, root):
    while pid > 1 and pid != root:
        pid = parents.get(pid, 0)
    return pid == root
root = int(sys.argv[1])
print(sum(1 for p in daemon if parents[p] not in daemon and under(p, root)))
"""


@pytest.fixture(scope="module")
def served(
    spark_remote: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[harness.Server, Path]]:
    """The server, of the harness's kind (``spark_remote`` decides it: the container's entry
    point in CI), and the folder it shares with the tests."""
    folder = tmp_path_factory.mktemp("shared-workers")
    with harness.dedicated_server(
        folder, "shared-workers", token=TOKEN, shared_python_workers=True
    ) as started:
        yield started, folder


def _daemons(server: harness.Server) -> int:
    """The server's Python worker daemons, counted from this machine's ``/proc`` under the
    server's process: the local one, or the container's first (``container_processes``)."""
    if isinstance(server, harness.ContainerServer):
        root, _ = harness.container_processes(server.container.get_wrapped_container())
    else:
        assert isinstance(server, LocalServer)
        root = server.process.pid
    command = [sys.executable, "-c", _COUNT_DAEMONS, str(root)]
    return int(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


def _follow(server: harness.Server, folder: Path, scd_type: int) -> None:
    """A new session follows a Delta table into a target across a restart (two streaming
    queries), and the target is the model's."""
    spark = SparkSession.builder.remote(server.url).create()
    try:
        source, target = str(folder / "source"), str(folder / "target")
        follow_across_a_restart(
            spark,
            source,
            target,
            stored_as_scd_type=scd_type,
            checkpoint_location=str(folder / "checkpoint"),
        )
        assert sorted_rows(read_table(target)) == model_rows(feed_changes(spark, source), scd_type)
    finally:
        spark.stop()


def test_streams_after_the_first_start_no_python_daemon_in_any_session(
    served: tuple[harness.Server, Path],
) -> None:
    server, folder = served
    _follow(server, folder / "first", 1)
    started = _daemons(server)
    assert started > 0  # the count sees the daemons the first session's streams started
    _follow(server, folder / "second", 2)  # another session, two more streams
    assert _daemons(server) == started


def test_clients_without_the_token_are_refused(served: tuple[harness.Server, Path]) -> None:
    server = served[0]
    base = server.url.split("/;")[0]
    session = SparkSession.builder.remote(base).create()
    session.release_session_on_close = False
    try:
        with pytest.raises(SparkConnectGrpcException, match="No authentication token provided"):
            session.range(1).collect()
    finally:
        session.stop()
