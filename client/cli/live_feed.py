"""A change feed brought to the client's terminal, commit by commit, as it arrives.

The stream reads the source's own feed and writes each micro-batch to its own parquet
folder in a spool directory on the server, through the server's ``spark_cdc_spool`` sink
(started by name: nothing pickled here runs there, so the client's Python need not be the
server's); the client post-processes each finished micro-batch as a batch and reads the
result. The source delivers whole commits per micro-batch, so the row-level passes give
exactly what the streaming plan gives, with no watermark delay, and the client also knows
each commit's raw change count: a commit whose changes were all carry-overs is reported,
not silent.
Net changes are computed within each micro-batch.

A micro-batch is finished when its folder exists: the writer fills a hidden folder and
renames it into place, so a folder under its final name is always whole. That is the one
completion signal. ``query.lastProgress`` is not one: after about ten idle seconds Spark
reports the *next* batch id with no input rows before that batch has run, and a feed that
took it as finished skipped the next commit (issue 27).
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
import uuid
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
from spark_cdc.rewrite.server_code import make_available
from spark_cdc.rewrite.spec import ChangelogSpec
from spark_cdc.server_plugin.sinks.spool import BATCH, SPOOL_SINK, SpoolSink
from spark_cdc.server_plugin.vocabulary import COMMIT_TIMESTAMP, COMMIT_VERSION


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
        make_available(self.raw.sparkSession, SpoolSink, "spark-cdc tail")
        writer = self.raw.writeStream.format(SPOOL_SINK).options(
            spool=self.spool, checkpoint=self.checkpoint
        )
        self.query = writer.option("checkpointLocation", self.checkpoint).start()
        return self

    def batches(self) -> Iterator[list[CommitChanges]]:
        """The commits of the micro-batches finished since the last call, in order.

        What the spool holds is read in one go: first each finished micro-batch's raw
        change counts, which also says which micro-batches there are; then their rows,
        post-processed, from exactly those (a micro-batch that lands in between waits for
        the next call). Row-level results are per commit, so the micro-batches share one
        job; net changes are computed within each micro-batch, so those are read one by
        one. Read folders are removed. A spool that cannot be read raises: a micro-batch is
        never skipped.
        """
        spark: SparkSession = self.raw.sparkSession
        try:
            spooled = spark.read.option("basePath", self.spool).parquet(f"{self.spool}/{BATCH}=*")
            spooled = spooled.filter(F.col(BATCH) >= self._next_batch)
            as_read = {**self.options, "deduplicationMode": "none", "computeUpdates": False}
            counts = (
                post_process(spooled, self.spec, as_read)
                .groupBy(BATCH, COMMIT_VERSION)
                .agg(F.max(COMMIT_TIMESTAMP), F.count(F.lit(1)))
                .collect()
            )
        except AnalysisException as error:
            if error.getCondition() == "PATH_NOT_FOUND":  # no micro-batch has finished yet
                return
            raise
        if not counts:
            return
        ready = sorted({int(r[0]) for r in counts})
        totals = {r[1]: (r[2], r[3]) for r in counts}
        self._next_batch = ready[-1] + 1
        groups = [[b] for b in ready] if self.nets_changes else [ready]
        for group in groups:
            rows = spooled.filter(F.col(BATCH).isin(group)).drop(BATCH)
            by_version: dict[int, list[Any]] = {}
            for row in post_process(rows, self.spec, self.options).collect():
                by_version.setdefault(row[COMMIT_VERSION], []).append(row)
            versions = sorted(r[1] for r in counts if r[0] in group)
            yield [CommitChanges(v, *totals[v], by_version.get(v, [])) for v in versions]
        self._release(self.spool, before=self._next_batch)

    def _release(self, folder: str, before: int | None = None) -> None:
        """Remove the spool's micro-batches below ``before`` (or all of ``folder``) where
        they are: here when the server shares this disk, else on the server, through the
        spool sink's reader (it may be remote)."""
        if Path(folder).exists():
            if before is None:
                shutil.rmtree(folder, ignore_errors=True)
            else:
                for done in Path(folder).glob(f"{BATCH}=*"):
                    if int(done.name.split("=", 1)[1]) < before:
                        shutil.rmtree(done, ignore_errors=True)
            return
        release = self.raw.sparkSession.read.format(SPOOL_SINK).option("spool", folder)
        if before is None:
            release = release.option("everything", "true")
        else:
            release = release.option("before", str(before))
        release.load().collect()

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
        removed = _within(end, lambda: self._release(self.work_dir))
        return stopped and removed


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
        lines.append(text_table(["_change_type", *columns], commit.rows))
    return "\n".join(lines)


def text_table(names: list[str], rows: list[Any]) -> str:
    """``rows`` (mappings or Rows) as a plain text table of the columns ``names``, indented."""
    cells = [[_text(r[c]) for c in names] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(names)]
    lines = ["  " + "  ".join(c.ljust(w) for c, w in zip(names, widths, strict=True))]
    lines += ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
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
