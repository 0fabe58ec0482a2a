"""A change feed brought to the client's terminal, commit by commit, as it arrives.

In Spark Connect a ``foreachBatch`` function runs on the server, so it cannot print here.
The stream reads the source's own feed and writes each micro-batch to its own parquet
folder in a spool directory on the server; the client post-processes each finished
micro-batch as a batch and reads the result. The source delivers whole commits per
micro-batch, so the row-level passes give exactly what the streaming plan gives, with no
watermark delay, and the client also knows each commit's raw change count: a commit whose
changes were all carry-overs is reported, not silent.
Net changes are computed within each micro-batch.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from spark_cdc.rewrite.options import DeduplicationMode, OptionValue, parse_options
from spark_cdc.rewrite.post_process import post_process
from spark_cdc.rewrite.spec import ChangelogSpec
from spark_cdc.server_plugin.vocabulary import COMMIT_TIMESTAMP, COMMIT_VERSION


def _spool_writer(spool: str, checkpoint: str) -> Callable[[DataFrame, int], None]:
    """The server-side function; a closure, so it travels by value and needs no package.

    The micro-batch comes to the function's own process as Arrow and is written from there,
    not by a Spark write job: a job the function starts goes on after the stream is stopped
    (the server detaches it from the stopped worker) and landed its files after the client
    had removed the spool (seen in the signal tests under load). Nothing is written once the
    query's checkpoint, removed with the spool, is gone. The client removes each folder once
    it has read it."""

    def write(batch: DataFrame, batch_id: int) -> None:
        import os

        import pyarrow.parquet as pq

        table = batch.toArrow()
        if not os.path.isdir(checkpoint):  # stopped and cleaned up meanwhile
            return
        folder = f"{spool}/batch={batch_id:012d}"
        os.makedirs(folder, exist_ok=True)
        pq.write_table(table, f"{folder}/part-0.parquet")

    return write


@dataclass(frozen=True)
class CommitChanges:
    """One commit as the feed shows it: its raw change count and its post-processed rows."""

    version: int
    timestamp: datetime
    raw_changes: int
    rows: list[Any]

    @property
    def removed(self) -> int:
        """Raw changes the passes removed (carry-overs; also what net changes netted away)."""
        return self.raw_changes - len(self.rows)


@dataclass
class LiveFeed:
    """Runs ``raw`` (a source's streaming change feed) and yields each finished micro-batch's
    commits once, in order, post-processed with ``spec`` and ``options``."""

    raw: DataFrame
    spec: ChangelogSpec
    options: Mapping[str, OptionValue]
    work_dir: str = field(default_factory=lambda: f"/tmp/spark-cdc-live-{uuid.uuid4().hex[:12]}")
    """Spool and checkpoint, on the server's disk (the same path on the client's disk when
    the server is local)."""
    query: Any = None
    _next_batch: int = 0

    @property
    def spool(self) -> str:
        return f"{self.work_dir}/spool"

    @property
    def checkpoint(self) -> str:
        return f"{self.work_dir}/checkpoint"

    @property
    def nets_changes(self) -> bool:
        return parse_options(self.options).deduplication_mode is DeduplicationMode.NET_CHANGES

    def start(self) -> LiveFeed:
        writer = self.raw.writeStream.foreachBatch(_spool_writer(self.spool, self.checkpoint))
        self.query = writer.option("checkpointLocation", self.checkpoint).start()
        return self

    def batches(self) -> Iterator[list[CommitChanges]]:
        """The commits of the micro-batches finished since the last call, in order.

        Row-level results are per commit, so every finished micro-batch is read in one go
        (two jobs however far the client is behind); net changes are computed within each
        micro-batch, so those are read one by one. Read folders are removed.
        """
        progress = self.query.lastProgress
        done = progress["batchId"] if progress else -1
        ready = list(range(self._next_batch, done + 1))
        if not ready:
            return
        self._next_batch = done + 1
        groups = [[b] for b in ready] if self.nets_changes else [ready]
        for group in groups:
            commits = self._read([f"{self.spool}/batch={b:012d}" for b in group])
            if commits:
                yield commits
        self._remove([f"{self.spool}/batch={b:012d}" for b in ready])

    def _read(self, folders: list[str]) -> list[CommitChanges]:
        spark: SparkSession = self.raw.sparkSession
        try:
            raw = spark.read.parquet(*folders)
            as_read = {**self.options, "deduplicationMode": "none", "computeUpdates": False}
            counts = (
                post_process(raw, self.spec, as_read)
                .groupBy(COMMIT_VERSION)
                .agg(F.max(COMMIT_TIMESTAMP), F.count(F.lit(1)))
            )
            totals = {r[0]: (r[1], r[2]) for r in counts.collect()}
        except AnalysisException:  # empty micro-batches may leave no readable file
            return []
        by_version: dict[int, list[Any]] = {v: [] for v in totals}
        for row in post_process(raw, self.spec, self.options).collect():
            by_version.setdefault(row[COMMIT_VERSION], []).append(row)
        return [
            CommitChanges(v, totals[v][0], totals[v][1], by_version[v])
            for v in sorted(by_version)
            if v in totals
        ]

    def _remove(self, folders: list[str]) -> None:
        """Remove folders where they are: on the server, by a one-task job (it may be
        remote), or here when the server shares this disk."""
        local = [f for f in folders if Path(f).exists()]
        for folder in local:
            shutil.rmtree(folder, ignore_errors=True)
        remote = [f for f in folders if f not in local]
        if remote:
            _remove_on_server(self.raw.sparkSession, remote)

    def check(self) -> None:
        if self.query is not None and (error := self.query.exception()) is not None:
            raise error

    def stop(self, deadline_s: float) -> bool:
        """Stop the query and remove the spool and checkpoint, within ``deadline_s`` seconds.

        ``StreamingQuery.stop()`` waits for a running micro-batch and has been seen to hang
        for over ten minutes on a loaded server; past the deadline it is left behind (the
        caller then closes the session, which ends the query). False if anything was.
        """
        end = time.monotonic() + deadline_s
        stopped = self.query is None or _within(end, self.query.stop)
        removed = _within(end, lambda: self._remove([self.work_dir]))
        return stopped and removed


def _remove_on_server(spark: SparkSession, folders: list[str]) -> None:
    """Remove ``folders`` on the server, by a one-task job whose function travels by value."""

    def remove(_):  # type: ignore[no-untyped-def]  # (no hints: Spark reads them as a UDF type)
        import shutil

        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)

    with warnings.catch_warnings():  # pyspark warns that a foreach function has no hints
        warnings.simplefilter("ignore", UserWarning)
        spark.range(1).foreach(remove)


def _within(end: float, action: Callable[[], object]) -> bool:
    """Run ``action`` on a daemon thread; True if it finished (even failing) before ``end``
    (a ``time.monotonic()`` value)."""

    def run() -> None:
        with contextlib.suppress(Exception):  # a failed step has still finished
            action()

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(max(end - time.monotonic(), 0.0))
    return not worker.is_alive()


def finished_within(seconds: float, action: Callable[[], object]) -> bool:
    """``action()`` given at most ``seconds``; True if it finished (even failing) in time."""
    return _within(time.monotonic() + seconds, action)


def render(commit: CommitChanges, columns: list[str], nets_changes: bool = False) -> str:
    """One commit: a header saying what came in and what the passes took out, then its
    changes as a plain text table."""
    removed = commit.removed
    taken = (
        f"{removed} netted away"
        if nets_changes
        else f"{removed} carry-over{'s' if removed != 1 else ''} removed"
    )
    shown = len(commit.rows)
    outcome = "no changes" if not shown else f"{shown} change{'s' if shown != 1 else ''}"
    raw = f"{commit.raw_changes} raw change{'s' if commit.raw_changes != 1 else ''}"
    lines = [f"commit {commit.version} at {commit.timestamp}: {raw}, {taken}, {outcome}"]
    if commit.rows:
        names = ["_change_type", *columns]
        cells = [[_text(r[c]) for c in names] for r in commit.rows]
        widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(names)]
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(names, widths, strict=True)))
        lines += [
            "  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells
        ]
    return "\n".join(lines)


def status_line(changes: int, started: float, last: CommitChanges | None) -> str:
    rate = changes / max(time.monotonic() - started, 1e-9)
    if last is None:
        return f"{changes} change(s), {rate:.1f}/s, {WAITING}"
    lag = time.time() - last.timestamp.timestamp()  # collect() gives local wall-clock datetimes
    return f"{changes} change(s), {rate:.1f}/s, last commit {last.version}, lag {max(lag, 0):.1f}s"


WAITING = "waiting for the first commit (server starting / first micro-batch planning)"


def _text(value: Any) -> str:
    return "NULL" if value is None else str(value)
