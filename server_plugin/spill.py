"""Rows more than a Python worker should hold at once, split by a part number into files
on Spark's local disk and read back one part at a time: how a source's task resolves a
large commit (``changefeed.resolving_reader``) and how the apply sink's task resolves a
large share of a batch (``sinks.apply.sink``), each holding one part (or a group of
neighbouring parts, ``in_groups``: the reader groups whole commits by it too) at a time.

Parts are uncompressed Arrow IPC read back through a memory map, without a copy: a 125 MB
share of the 50-column benchmark commit spilled in two parts took 1.00 s to read and
resolve, against 1.19 s with lz4 and 0.87 s unspilled. Spark hands a task its rows in
batches of 10,000, and a batch's 64th of them is some 150 rows: ``in_parts`` splits a few
MiB of them at a time (5M rows of the first-load benchmark's columns, in 64 parts: 1.21 s
batch by batch, 0.41 s in pieces of 4 MiB with the parts sorted as bytes).
"""

from __future__ import annotations

import os
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import numpy as np
import pyarrow as pa
from spark_cdc.server_plugin.arrow_types import from_numpy

T = TypeVar("T")


# How many bytes of rows ``in_parts`` splits at once (measured in the module docstring).
_PIECE_BYTES = 4 << 20


def spilled(
    batches: Iterable[tuple[pa.RecordBatch, np.ndarray | None]],
    schema: pa.Schema,
    parts: int,
    most_bytes: int | None = None,
) -> Iterator[pa.Table]:
    """The batches as one table, or, split into their ``parts`` written to local disk, as
    one table per part (each batch comes with its rows' parts, ascending). With
    ``most_bytes``, neighbouring parts are read back together while their files hold at
    most that many bytes: few tables where the rows are few, a bound where they are many."""
    if parts <= 1:
        collected = [batch for batch, _ in batches]
        if collected:
            yield pa.Table.from_batches(collected, schema=schema)
        return
    with tempfile.TemporaryDirectory(prefix="spark_cdc_", dir=_local_dir()) as folder:
        paths = [os.path.join(folder, f"part-{i}.arrow") for i in range(parts)]
        writers = [pa.ipc.new_file(path, schema) for path in paths]
        try:
            for batch, part in batches:
                assert part is not None  # with parts > 1 every batch comes split
                ends = np.searchsorted(part, np.arange(1, parts + 1))
                for index, (start, end) in enumerate(zip([0, *ends[:-1]], ends, strict=True)):
                    if end > start:
                        writers[index].write_batch(batch.slice(start, end - start))
        finally:
            for writer in writers:
                writer.close()
        for group in in_groups(range(parts), lambda i: os.path.getsize(paths[i]), most_bytes):
            tables = []
            for index in group:
                with pa.memory_map(paths[index]) as source:
                    tables.append(pa.ipc.open_file(source).read_all())
            table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
            del tables
            if table.num_rows:
                yield table
            del table
            for index in group:
                os.remove(paths[index])


def in_groups(items: Iterable[T], size: Callable[[T], int], most: int | None) -> Iterator[list[T]]:
    """Neighbouring items whose sizes add up to at most ``most`` (one alone may hold
    more; None: each alone)."""
    group: list[T] = []
    held = 0
    for item in items:
        cost = size(item)
        if group and (most is None or held + cost > most):
            yield group
            group, held = [], 0
        group.append(item)
        held += cost
    if group:
        yield group


def in_parts(
    batches: Iterable[pa.RecordBatch],
    part_of: Callable[[pa.RecordBatch], np.ndarray],
    parts: int,
    most_bytes: int,
    group_bytes: int | None = None,
) -> Iterator[pa.Table]:
    """The batches as one table while they hold at most ``most_bytes``; past that, every
    batch split by ``part_of`` (a part in ``[0, parts)`` for each row) and spilled, then
    read back one table per part, or with ``group_bytes`` as tables of whole parts of at
    most that many bytes each unless one part alone holds more."""
    held: deque[pa.RecordBatch] = deque()
    size = 0
    rest = iter(batches)
    for batch in rest:
        held.append(batch)
        size += batch.nbytes
        if size > most_bytes:
            schema = held[0].schema
            split = _split(_pieces(_drained(held, rest), _PIECE_BYTES), part_of, parts)
            yield from spilled(split, schema, parts, group_bytes)
            return
    if held:
        yield pa.Table.from_batches(held, schema=held[0].schema)


def _drained(
    held: deque[pa.RecordBatch], rest: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The held batches, each let go once handed on, then the rest."""
    while held:
        yield held.popleft()
    yield from rest


def _pieces(batches: Iterable[pa.RecordBatch], most_bytes: int) -> Iterator[pa.RecordBatch]:
    """The batches as batches of about ``most_bytes`` each, in order."""
    held: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        held.append(batch)
        size += batch.nbytes
        if size >= most_bytes:
            yield from pa.Table.from_batches(held).combine_chunks().to_batches()
            held, size = [], 0
    if held:
        yield from pa.Table.from_batches(held).combine_chunks().to_batches()


def _split(
    batches: Iterable[pa.RecordBatch],
    part_of: Callable[[pa.RecordBatch], np.ndarray],
    parts: int,
) -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
    """Each batch's rows ordered by part, stably (numpy's radix sort, on the narrowest
    type that holds the parts' count), with their parts."""
    narrow = np.min_scalar_type(parts)
    for batch in batches:
        part = part_of(batch).astype(narrow)
        order = np.argsort(part, kind="stable")
        yield batch.take(from_numpy(order)), part[order]


def _local_dir() -> str | None:
    """Spark's local directories (set for its Python workers), else the system's."""
    found = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0].strip()
    return found if found and os.path.isdir(found) else None
