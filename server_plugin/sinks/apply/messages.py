"""What a task of the apply sink hands its commit (``sink``): its share of the batch resolved
(``ResolvedChanges``: a ``batch.Share``, its tables as compressed Arrow IPC, the files it
staged), or its rows for the commit to resolve (``StagedChanges``). A share past
``_HELD_BYTES`` is spilled to local disk by key and resolved part by part (``spill``).

Imported by the sink's module, which Spark's Python processes load to make the writer: it
imports Arrow and the engine only where a task or the commit uses them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import WriterCommitMessage
from spark_cdc.server_plugin.sinks.apply.engine.spec import ApplySpec

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    from spark_cdc.server_plugin.sinks.apply.engine.batch import Share, ShareTables
    from spark_cdc.server_plugin.sinks.apply.engine.staged import Staged


@dataclass
class StagedChanges(WriterCommitMessage):
    """One task's partition of the prepared feed, as a compressed Arrow IPC stream."""

    data: bytes
    rows: int


@dataclass
class ResolvedChanges(WriterCommitMessage):
    """One task's ``batch.Share``: its tables as compressed Arrow IPC streams, and the
    files it staged into the tables."""

    state: tuple[str, int] | None
    rebuilds: bool
    schema: bytes
    changes: int
    keys: int
    tables: tuple[bytes, bytes, bytes, bytes]  # replaced, rows, state, kept
    staged: Staged


def _message(share: Share) -> ResolvedChanges:
    """A task's ``Share`` as its commit message."""
    parts = share.resolution
    return ResolvedChanges(
        share.state,
        share.rebuilds,
        share.schema.serialize().to_pybytes(),
        share.changes,
        parts.keys,
        (_ipc(parts.replaced), _ipc(parts.rows), _ipc(parts.state), _ipc(parts.kept)),
        share.staged,
    )


def shares(messages: list[Any]) -> list[Share]:
    import pyarrow as pa
    from spark_cdc.server_plugin.sinks.apply.engine.batch import Share
    from spark_cdc.server_plugin.sinks.apply.engine.history import Resolution

    shares = []
    for m in messages:
        if isinstance(m, ResolvedChanges):
            replaced, rows, state, kept = (_table(data) for data in m.tables)
            resolution = Resolution(replaced, rows, state, False, kept, m.keys)
            schema = pa.ipc.read_schema(pa.py_buffer(m.schema))
            shares.append(Share(m.state, m.rebuilds, schema, m.changes, resolution, m.staged))
    return shares


def _ipc(table: pa.Table) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, table.schema, options=options) as stream:
        stream.write_table(table)
    return sink.getvalue().to_pybytes()


def _table(data: bytes) -> pa.Table:
    import pyarrow as pa

    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


# A task holds its share of a batch whole up to this many bytes of rows (its resolving
# takes about ten times as much); past it, the share is spilled to local disk in
# ``_PARTS`` parts by key, read back and resolved in groups of whole parts of up to
# ``_GROUP_BYTES`` (``spill``): a few groups, so a few files staged, where the share is
# not much larger; one part at a time, each about a 64th of the share, where it is (a
# 12 GB share, some 300M rows of four columns, stays under 2 GB of memory).
_HELD_BYTES = 128 << 20
_GROUP_BYTES = 32 << 20
_PART_BITS = 6
_PARTS = 1 << _PART_BITS


def task_message(
    spec: ApplySpec, batches: Iterator[pa.RecordBatch], held_bytes: int = _HELD_BYTES
) -> WriterCommitMessage:
    """A task's message: its share resolved when the plan partitioned the feed by key
    (part by part past ``held_bytes``), else its rows, for the commit to resolve (a feed
    with truncates: each needs every key; a refresh that found one table marked by its
    writer and not the other)."""
    from spark_cdc.server_plugin.sinks.apply.engine.batch import combined
    from spark_cdc.server_plugin.sinks.apply.task import resolved
    from spark_cdc.server_plugin.spill import in_parts

    if not spec.partitioned_by_key:
        return _rows_message(list(batches))
    parts = in_parts(batches, _part_of, _PARTS, held_bytes, min(held_bytes, _GROUP_BYTES))
    shares = []
    opened: list[ShareTables | None] = []  # the tables, opened by the first part for all
    for rows in parts:
        share = resolved(spec, rows, opened)
        if share is None:  # the commit resolves the batch whole: every row travels
            return _rows_message([b for t in (rows, *parts) for b in t.to_batches()])
        shares.append(share)
    if not shares:
        return StagedChanges(b"", 0)
    return _message(combined(spec, shares))


def _rows_message(batches: list[pa.RecordBatch]) -> StagedChanges:
    import pyarrow as pa

    if not sum(b.num_rows for b in batches):
        return StagedChanges(b"", 0)
    rows = pa.Table.from_batches(batches)
    return StagedChanges(_ipc(rows), rows.num_rows)


def _part_of(batch: pa.RecordBatch) -> np.ndarray:
    """Each row's part of a spilled share, from its key's hash (the task's share is the
    hash modulo the tasks: the part mixes all its bits, Fibonacci hashing); one part for
    a batch without key hashes."""
    import numpy as np
    from spark_cdc.server_plugin.arrow_types import to_numpy
    from spark_cdc.server_plugin.sinks.apply.engine.spec import KEY_HASH

    if KEY_HASH not in batch.schema.names:
        return np.zeros(batch.num_rows, np.uint64)
    hashes = to_numpy(batch.column(KEY_HASH)).astype(np.uint32).astype(np.uint64)
    return ((hashes * 2654435769) & 0xFFFFFFFF) >> (32 - _PART_BITS)


def rows_of(messages: list[Any]) -> list[Any]:
    """The messages of tasks that had rows (their own or resolved)."""
    return [
        m
        for m in messages
        if isinstance(m, ResolvedChanges) or (isinstance(m, StagedChanges) and m.rows)
    ]


def unstaged(messages: list[Any]) -> pa.Table | None:
    """The batch's rows from every task's message (None: no rows)."""
    import pyarrow as pa

    tables = [_table(m.data) for m in messages if isinstance(m, StagedChanges) and m.rows]
    if not tables:
        return None
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]
