"""The state's rows a batch needs, found in its files whatever the format: a task's share of
a batch reads only its keys' changes (``rows_in_files``), from the row groups that hold
them, through the per-file key indexes a machine's tasks keep (``file_lookup``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.arrow_types import to_numpy
from spark_cdc.server_plugin.sinks.apply.engine.file_lookup import (
    Files,
    file_identities,
    may_hold_nulls,
    rows_at,
    rows_of_keys,
)
from spark_cdc.server_plugin.sinks.apply.engine.key_index import BudgetCache, FileKeysCache
from spark_cdc.server_plugin.sinks.apply.engine.shared_cache import TABLE, SharedFiles
from spark_cdc.server_plugin.sinks.apply.engine.spec import BUCKET, OP, TRUNCATE, ApplySpec

# What a machine's tasks keep of the state's files between micro-batches (``rows_in_files``):
# their key indexes, and the row groups read, in files every Python worker maps
# (``shared_cache``: Spark gives a bucket's task any worker). A task reads its buckets of
# the state (``buckets``): of 10M keys in two, 40 MB of indexes of one integer key (more
# for a hashed key, whose columns are kept to confirm matches), 165 MB of rows in type 1,
# 375 MB in type 2 of five columns: every bucket's within the budgets.
STATE_KEYS_BYTES = 512 << 20
STATE_ROWS_BYTES = 1280 << 20
_STATE_KEYS = FileKeysCache(STATE_KEYS_BYTES, shared="state-keys")
_STATE_ROWS: BudgetCache[pa.Table] = BudgetCache(
    STATE_ROWS_BYTES, lambda rows: rows.nbytes, SharedFiles("state-rows", STATE_ROWS_BYTES, TABLE)
)


def rows_in_files(
    log: Files,
    files: pa.Table,
    schema: pa.Schema,
    spec: ApplySpec,
    keys: pa.Table,
    earliest: pa.Scalar | None,
    buckets: np.ndarray | None,
    partitions: frozenset[str] = frozenset(),
) -> pa.Table:
    """The state's changes of ``keys`` (exactly) and its truncate, read from the files
    that hold them, only the row groups that do: what a task resolves its share of a batch
    with. ``files``: the state's, described as delta-rs lists add actions (``partitions``:
    its partition columns); ``schema`` types their rows. The files' key indexes are kept
    per process (``_STATE_KEYS``), so a stream's later micro-batches read only the rows
    they need. A truncate's key is NULL: only files whose statistics allow a NULL key are
    read for it.

    ``earliest``: the share's smallest sequence (its first part), when each of its changes
    supersedes every stored change before it (``supersedes``): a file whose statistics put
    all its changes before that holds nothing the share needs, and is not read. A stream
    whose sequence grows (commit versions, timestamps) then reads no state at all.

    ``buckets``: those the keys are in, of a state laid out by bucket (``buckets``): the
    keys are looked for in their files only."""
    if earliest is not None:
        files = files.filter(pc.invert(_before(files, spec.sequence[0], earliest)))
    in_buckets = files
    if buckets is not None:
        bucket = files.column(f"partition.{BUCKET}").cast(pa.int32())
        in_buckets = files.filter(pc.is_in(bucket, value_set=pa.array(buckets, pa.int32())))
    found = rows_of_keys(log, in_buckets, keys, list(spec.keys), _STATE_KEYS, partitions)
    _STATE_ROWS.next_round()
    for row in np.flatnonzero(may_hold_nulls(files, spec.keys[0])):
        path = files.column("path")[row].as_py()
        kinds = rows_at(log, path, None, pa.schema([schema.field(OP)])).column(OP)
        truncates = truncate_positions(pa.table({OP: kinds}))
        if len(truncates):
            found[path] = np.union1d(found.get(path, truncates), truncates)
    identities = file_identities(log, files)
    parts = [
        rows_at(log, path, at, schema, _STATE_ROWS, identities[path]) for path, at in found.items()
    ]
    return pa.concat_tables(parts) if parts else schema.empty_table()


def supersedes(spec: ApplySpec, sequence: pa.DataType) -> bool:
    """Whether a change supersedes every stored change of its key with an earlier sequence
    (``rows_in_files``): in type 1, unless the state keeps values (``ignore_null_updates`` fills
    from them), a key's latest change alone decides it, and a truncate before a change
    drops none of it. Only for a sequence whose statistics are exact (integers, dates,
    timestamps: a string's may be cut short, a float's has NaN)."""
    exact = pa.types.is_integer(sequence) or pa.types.is_date(sequence)
    exact = exact or pa.types.is_timestamp(sequence)
    return spec.scd_type == 1 and not spec.state_keeps_values and exact


def _before(files: pa.Table, name: str, earliest: pa.Scalar) -> Any:
    """Per file: whether its statistics put every value of ``name`` before ``earliest``
    (a file without them may hold any)."""
    column = f"max.{name}"
    if column not in files.schema.names:
        return pa.repeat(pa.scalar(False), files.num_rows)
    latest = files.column(column)
    return pc.fill_null(pc.less(latest, earliest.cast(latest.type)), False)


def truncate_positions(rows: pa.Table) -> np.ndarray:
    """Where ``rows`` (the state's) hold a truncate."""
    return np.flatnonzero(to_numpy(pc.equal(rows.column(OP), TRUNCATE).fill_null(False)))
