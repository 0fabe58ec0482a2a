"""``spark_cdc_spool``: the sink ``spark-cdc tail`` streams a change feed into, on the
server's disk, and the reader that removes what the client has read. Both run the server's
installed code, started by name: a client on any Python can tail a table.

Each micro-batch lands in its own folder ``spark_cdc_batch=<id>`` of the spool, complete or
not at all: tasks write their part into hidden files (Spark lists no name starting with
".") and the driver's ``commit`` moves them into a hidden folder renamed into place, so a
folder under its final name is always whole, the one completion signal the client reads.
A micro-batch Spark runs again after a failure finds its folder there and leaves it. An
empty micro-batch writes nothing (it has no commit to show), and nothing is written once
the query's checkpoint is gone (the client removed the spool after stopping: a task still
running then lands nothing).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType
from spark_cdc.server_plugin.cdc_options import option

SPOOL_SINK = "spark_cdc_spool"
BATCH = "spark_cdc_batch"
"""The spool's partition column: folder ``spark_cdc_batch=<id>`` holds micro-batch ``id``."""
RELEASE_SCHEMA = "removed int"


@dataclass
class SpooledPart(WriterCommitMessage):
    """A task's part of a micro-batch: a hidden Parquet file (None: no rows)."""

    file: str | None


class SpoolSink(DataSource):
    """Options: ``spool`` (the folder), ``checkpoint`` (the query's); reading also takes
    ``before`` (remove the folders of micro-batches below it) or ``everything``."""

    @classmethod
    def name(cls) -> str:
        return SPOOL_SINK

    def schema(self) -> str:
        return RELEASE_SCHEMA

    def streamWriter(self, schema: StructType, overwrite: bool) -> SpoolWriter:
        spool, checkpoint = option(self.options, "spool"), option(self.options, "checkpoint")
        assert spool and checkpoint, "the spool sink needs spool and checkpoint options"
        return SpoolWriter(spool, checkpoint)

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Release(
            option(self.options, "spool") or "",
            option(self.options, "before"),
            option(self.options, "everything") == "true",
        )


class SpoolWriter(DataSourceStreamWriter, DataSourceArrowWriter):
    """An Arrow writer too: Spark 4.0 hands a stream writer Arrow batches only then."""

    def __init__(self, spool: str, checkpoint: str) -> None:
        self.spool, self.checkpoint = spool, checkpoint

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SpooledPart:
        import pyarrow.parquet as pq

        batches = [b for b in iterator if b.num_rows]
        if not batches or not os.path.isdir(self.checkpoint):
            return SpooledPart(None)
        os.makedirs(self.spool, exist_ok=True)
        file = os.path.join(self.spool, f".part-{uuid.uuid4().hex}.parquet")
        pq.write_table(pa.Table.from_batches(batches), file)
        return SpooledPart(file)

    # A stream writer's commit and abort take the batch id (DataSourceStreamWriter's).
    def commit(self, messages: list[Any], batchId: int) -> None:  # type: ignore[override]
        files = _files(messages)
        if not files:
            return
        final = os.path.join(self.spool, f"{BATCH}={batchId}")
        if os.path.isdir(final) or not os.path.isdir(self.checkpoint):
            _discard(files)  # written by an earlier run of this micro-batch, or stopped
            return
        hidden = os.path.join(self.spool, f".{BATCH}={batchId}.{uuid.uuid4().hex}")
        os.makedirs(hidden)
        for i, file in enumerate(files):
            os.rename(file, os.path.join(hidden, f"part-{i}.parquet"))
        try:
            os.rename(hidden, final)
        except OSError:  # the folder appeared meanwhile
            shutil.rmtree(hidden, ignore_errors=True)

    def abort(self, messages: list[Any], batchId: int) -> None:  # type: ignore[override]
        _discard(_files(messages))


def _files(messages: list[Any]) -> list[str]:
    return [m.file for m in messages if isinstance(m, SpooledPart) and m.file]


def _discard(files: list[str]) -> None:
    for file in files:
        if os.path.exists(file):
            os.remove(file)


class _Release(DataSourceReader):
    """Removes the micro-batches the client has read (below ``before``) or the whole
    spool; its one row says how many folders went."""

    def __init__(self, spool: str, before: str | None, everything: bool) -> None:
        self.spool, self.before, self.everything = spool, before, everything

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        if self.everything:
            existed = os.path.isdir(self.spool)
            shutil.rmtree(self.spool, ignore_errors=True)
            yield (int(existed),)
            return
        removed = 0
        below = int(self.before or 0)
        for name in os.listdir(self.spool) if os.path.isdir(self.spool) else []:
            if name.startswith(f"{BATCH}=") and int(name.split("=", 1)[1]) < below:
                shutil.rmtree(os.path.join(self.spool, name), ignore_errors=True)
                removed += 1
        yield (removed,)
