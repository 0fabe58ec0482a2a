"""A streaming change feed brought to the client's terminal, micro-batch by micro-batch.

In Spark Connect a ``foreachBatch`` function runs on the server, so it cannot print here.
Each micro-batch is written to its own parquet folder in a spool directory on the server
(the function keeps only the last few) and the client reads the folders as the query's
progress reports them. Unlike a memory sink, nothing grows with the length of the session.
"""

from __future__ import annotations

import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

KEEP_BATCHES = 8


def _spool_writer(spool: str, keep: int) -> Callable[[DataFrame, int], None]:
    """The server-side function; a closure, so it travels by value and needs no package."""

    def write(batch: DataFrame, batch_id: int) -> None:
        import os
        import shutil

        batch.write.mode("overwrite").parquet(f"{spool}/batch={batch_id:012d}")
        old = f"{spool}/batch={batch_id - keep:012d}"
        if batch_id >= keep and os.path.isdir(old):
            shutil.rmtree(old, ignore_errors=True)

    return write


@dataclass
class LiveFeed:
    """Runs ``df`` and yields each micro-batch's rows once, in order."""

    df: DataFrame
    work_dir: str = field(default_factory=lambda: f"/tmp/spark-cdc-live-{uuid.uuid4().hex[:12]}")
    query: Any = None
    _next_batch: int = 0

    @property
    def spool(self) -> str:
        return f"{self.work_dir}/spool"

    def start(self) -> LiveFeed:
        writer = self.df.writeStream.foreachBatch(_spool_writer(self.spool, KEEP_BATCHES))
        self.query = writer.option("checkpointLocation", f"{self.work_dir}/checkpoint").start()
        return self

    def batches(self) -> Iterator[tuple[int, list[Any]]]:
        """Micro-batches finished since the last call, as (batch id, rows)."""
        progress = self.query.lastProgress
        done = progress["batchId"] if progress else -1
        spark: SparkSession = self.df.sparkSession
        while self._next_batch <= done:
            batch_id = self._next_batch
            self._next_batch += 1
            try:
                rows = spark.read.parquet(f"{self.spool}/batch={batch_id:012d}").collect()
            except AnalysisException:  # an empty micro-batch may leave no readable file
                continue
            if rows:
                yield batch_id, rows

    def check(self) -> None:
        if self.query is not None and self.query.exception() is not None:
            raise self.query.exception()

    def stop(self) -> None:
        """Stop the query and remove the spool and checkpoint on the server."""
        if self.query is not None:
            self.query.stop()
        work_dir = self.work_dir

        def remove(_):  # type: ignore[no-untyped-def]  # (no hints: Spark reads them as a UDF type)
            import shutil

            shutil.rmtree(work_dir, ignore_errors=True)

        with warnings.catch_warnings():  # pyspark warns that a foreach function has no hints
            warnings.simplefilter("ignore", UserWarning)
            self.df.sparkSession.range(1).foreach(remove)


def render(rows: list[Any], columns: list[str]) -> str:
    """A plain text table, commit by commit."""
    by_commit: dict[tuple[int, Any], list[Any]] = {}
    for row in rows:
        by_commit.setdefault((row["_commit_version"], row["_commit_timestamp"]), []).append(row)
    out: list[str] = []
    for (version, stamp), changes in sorted(by_commit.items(), key=lambda kv: kv[0][0]):
        out.append(f"commit {version} at {stamp} ({len(changes)} change(s))")
        shown = ["_change_type", *columns]
        cells = [[_text(r[c]) for c in shown] for r in changes]
        widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(shown)]
        out.append("  " + "  ".join(c.ljust(w) for c, w in zip(shown, widths, strict=True)))
        out += ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(out)


def status_line(rows: int, started: float, last: Any | None) -> str:
    rate = rows / max(time.monotonic() - started, 1e-9)
    if last is None:
        return f"{rows} change(s), {rate:.1f}/s, waiting for the first commit"
    version, stamp = last
    lag = time.time() - stamp.timestamp()  # collect() gives local wall-clock datetimes
    return f"{rows} change(s), {rate:.1f}/s, last commit {version}, lag {max(lag, 0):.1f}s"


def _text(value: Any) -> str:
    return "NULL" if value is None else str(value)
