"""The state laid out by key bucket, so that a task reads only the part of the state its keys
can be in: after a restart, a stream's tasks each read their share of the state, not all of
it, and each keeps only that share in memory.

The client's plan adds ``KEY_HASH``, Spark's ``hash()`` of the key columns (Murmur3, the
hash ``repartition`` places rows by; a string as its UTF-8 bytes, whatever its collation),
and partitions the feed by the same columns into as many tasks as the server runs at once.
A state the first batch makes is partitioned by ``BUCKET`` = ``pmod(KEY_HASH, count)``,
``count`` being that many tasks (kept in the column's metadata: delta-rs refuses table
properties it does not know), and keeps each row's ``KEY_HASH``. A task then reads the
buckets its rows' hashes fall in: its own when the server runs as many tasks as when the
state was made, a share of them otherwise. The layout only prunes what is read (each file's
rows are still matched by key), so a feed partitioned otherwise reads more, never less.
Every row of a key is in its hash's bucket: each write to the state computes ``BUCKET``
from the rows' ``KEY_HASH`` (a NULL key, a truncate's, hashes to Spark's seed). The keys'
types are fixed by the state's schema (a feed of other types is refused), so a key hashes
alike in every batch.

A state made without ``KEY_HASH`` (before this layout, or by a caller with no plan) stays
as it is: every task reads all of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from spark_cdc.server_plugin.arrow_types import from_numpy, to_numpy
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.sinks.apply.engine.spec import BUCKET, KEY_HASH

# The field metadata of ``BUCKET`` that says how many buckets the state has.
COUNT_KEY = "spark_cdc.keyBuckets"


@dataclass(frozen=True)
class Layout:
    """How a state stores its rows: with their ``KEY_HASH`` or not, and in how many
    buckets (None: one folder, every task reads all of it)."""

    keeps_hash: bool
    buckets: int | None

    @classmethod
    def of(cls, table: Any) -> Layout:
        """The layout of the state ``table``."""
        fields = {f.name: f for f in table.schema().fields}
        buckets = None
        if BUCKET in table.metadata().partition_columns:
            counted = fields[BUCKET].metadata.get(COUNT_KEY)
            buckets = count_of(counted, table.table_uri, f"column {BUCKET}'s {COUNT_KEY}")
        return cls(KEY_HASH in fields, buckets)

    @classmethod
    def new(cls, rows: pa.Schema, buckets: int) -> Layout:
        """The layout of a state the first batch makes of rows of schema ``rows``:
        bucketed when they carry ``KEY_HASH`` and the feed was split in several tasks."""
        keeps_hash = KEY_HASH in rows.names
        return cls(keeps_hash, buckets if keeps_hash and buckets > 1 else None)

    @property
    def partition_by(self) -> list[str]:
        return [BUCKET] if self.buckets else []

    def schema(self, schema: pa.Schema) -> pa.Schema:
        """A new state's schema, its rows' being ``schema``."""
        if not self.keeps_hash and KEY_HASH in schema.names:
            schema = schema.remove(schema.get_field_index(KEY_HASH))
        if self.buckets:
            metadata = {COUNT_KEY: str(self.buckets)}
            schema = schema.append(pa.field(BUCKET, pa.int32(), metadata=metadata))
        return schema

    def rows(self, rows: pa.Table) -> pa.Table:
        """``rows`` as this state is written: as its files hold them, with their bucket
        when it is bucketed."""
        rows = self.file_rows(rows)
        if not self.buckets:
            return rows
        hashes = to_numpy(rows.column(KEY_HASH))
        return rows.append_column(BUCKET, from_numpy(of(hashes, self.buckets)))

    def file_rows(self, rows: pa.Table) -> pa.Table:
        """``rows`` as this state's files hold them (what reading them returns): without
        the bucket, a partition column, and without ``KEY_HASH`` when it keeps none."""
        if BUCKET in rows.column_names:
            rows = rows.drop_columns([BUCKET])
        if not self.keeps_hash:
            return rows.drop_columns([KEY_HASH]) if KEY_HASH in rows.column_names else rows
        if KEY_HASH not in rows.column_names or rows.column(KEY_HASH).null_count:
            problem = "rows for a state that keeps key hashes came without them"
            raise error("APPLY_CHANGES.INTERNAL_ERROR", path="?", problem=problem)
        return rows

    def check_batch(self, schema: pa.Schema, state: str) -> None:
        """A state that keeps key hashes takes only batches that carry them (the client's
        plan adds them: a batch without them is a bug of ours)."""
        if self.keeps_hash and KEY_HASH not in schema.names:
            problem = "the batch has no key hashes, which its state keeps (``buckets``)"
            raise error("APPLY_CHANGES.INTERNAL_ERROR", path=state, problem=problem)

    def buckets_of(self, rows: pa.Table) -> np.ndarray | None:
        """The buckets a task's share ``rows`` falls in (None: all of them)."""
        if not self.buckets or KEY_HASH not in rows.column_names:
            return None
        return np.unique(of(to_numpy(rows.column(KEY_HASH)), self.buckets))


def count_of(recorded: str | None, state: str, where: str) -> int:
    """The bucket count a bucketed state records (``where``), refused by name when a hand
    removed or changed it: its rows could not be found by bucket."""
    try:
        count = int(str(recorded))
    except ValueError:
        count = 0
    if count < 1:
        problem = f"{where} is {recorded!r}, not the count of buckets its rows are laid out in"
        raise error("APPLY_CHANGES.STATE_LAYOUT_CHANGED", state=state, problem=problem)
    return count


def of(hashes: np.ndarray, buckets: int) -> np.ndarray:
    """Each hash's bucket: Spark's ``pmod(hash, buckets)``."""
    return np.mod(hashes.astype(np.int64), buckets).astype(np.int32)


def stored(schema: pa.Schema) -> pa.Schema:
    """The state's columns its data files hold: all but the partition column."""
    return pa.schema([f for f in schema if f.name != BUCKET])
