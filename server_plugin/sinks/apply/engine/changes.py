"""A batch's changes as the rules take them, whatever the target's format: the prepared feed
checked (``prepared``), its changes joined with the state's of its keys (``changes_of``),
the tables' schemas for a feed (``target_schema``, ``state_schema``), and what a resolved
batch writes and reports (``inserted``, ``written_rows``, ``described``).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.arrow_types import from_numpy, to_numpy
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.row_level.arrays import array
from spark_cdc.server_plugin.row_level.hashing import rows_hash
from spark_cdc.server_plugin.sinks.apply.engine.columns import writable_schema
from spark_cdc.server_plugin.sinks.apply.engine.history import (
    APPLIED_AT,
    HASH,
    NEW,
    Resolution,
    compacted,
)
from spark_cdc.server_plugin.sinks.apply.engine.runs import ALIVE
from spark_cdc.server_plugin.sinks.apply.engine.spec import (
    DELETE,
    END_AT,
    KEY_HASH,
    OP,
    START_AT,
    TRUNCATE,
    ApplySpec,
    sequence_column,
)

APPLIED_AT_TYPE = pa.timestamp("us", "UTC")


@dataclass(frozen=True)
class Outcome:
    """What one batch did, as the status row reports it."""

    changes: int
    keys: int
    rows: int
    skipped: bool


def prepared(spec: ApplySpec, batch: pa.Table) -> tuple[ApplySpec, pa.Table]:
    """The spec and batch as the rules take them: a struct sequence as its fields, the
    batch checked (``_checked``)."""
    spec, batch = _struct_sequence_flattened(spec, batch)
    return spec, _checked(spec, batch)


def now() -> pa.Scalar:
    return pa.scalar(int(time.time() * 1_000_000), pa.int64()).cast(APPLIED_AT_TYPE)


def inserted(spec: ApplySpec, resolution: Resolution) -> pa.Table:
    """The rows the batch adds to the target (type 1: those of its changed keys that are
    there after it)."""
    rows = resolution.rows
    if spec.scd_type == 2:
        return rows
    return rows.filter(rows.column(ALIVE)).drop_columns([ALIVE])


def described(spec: ApplySpec, version: int, outcome: Outcome, tasks: int) -> str:
    """The outcome as the tables' commits keep it (each format's ``OUTCOME_KEY``), with the
    writer's id, the batch's number (what a batch call and ``spark-cdc apply`` read) and
    the tasks that resolved it."""
    figures = {"app_id": spec.app_id, "batch": version, **dataclasses.asdict(outcome)}
    return json.dumps({**figures, "tasks": tasks})


def written_rows(resolution: Resolution) -> int:
    """The rows the target got (type 1's rows of deleted keys are not rows)."""
    rows = resolution.rows
    if ALIVE not in rows.column_names:
        return rows.num_rows
    return int(pc.sum(rows.column(ALIVE)).as_py() or 0)


def check_not_null(schema: pa.Schema, spec: ApplySpec, rows: pa.Table) -> None:
    """Refused before any write: a NULL for a column the target (of ``schema``) declares
    NOT NULL."""
    for field in schema:
        if not field.nullable and field.name in rows.column_names:
            count = rows.column(field.name).null_count
            if count:
                raise error(
                    "APPLY_CHANGES.NOT_NULL_CONSTRAINT_VIOLATED",
                    path=spec.target,
                    column=field.name,
                    count=count,
                )


def compacted_state(spec: ApplySpec, schema: pa.Schema, stored: pa.Table) -> pa.Table:
    """Type 1's whole state (``stored``, of a batch of ``schema``) reduced to the changes
    that still decide a key, expired tombstones dropped."""
    at = now()
    retention = spec.tombstone_retention_ms
    cutoff = None if retention is None else pa.scalar(at.value - retention * 1000, pa.int64())
    forget_before = None if cutoff is None else cutoff.cast(APPLIED_AT_TYPE)
    return compacted(changes_of(spec, schema.empty_table(), stored), spec, at, forget_before)


def _struct_sequence_flattened(spec: ApplySpec, batch: pa.Table) -> tuple[ApplySpec, pa.Table]:
    """A sequence given as one struct Column (Databricks' way to order by several columns,
    ``sequence_by=struct("a", "b")``) as its fields compared in order, named by them."""
    if len(spec.sequence) != 1 or not pa.types.is_struct(batch.schema.field(spec.sequence[0]).type):
        return spec, batch
    sequence = batch.column(spec.sequence[0])
    fields = list(sequence.type)
    batch = batch.drop_columns([spec.sequence[0]])
    for i, field in enumerate(fields):
        part = pc.struct_field(sequence, [i])
        if sequence.null_count:  # a NULL struct is a NULL sequence
            part = pc.if_else(pc.is_null(sequence), pa.scalar(None, field.type), part)
        batch = batch.append_column(sequence_column(i), part)
    return dataclasses.replace(spec, sequence_names=tuple(f.name for f in fields)), batch


def _checked(spec: ApplySpec, batch: pa.Table) -> pa.Table:
    """The batch with Delta's types, refused whole when its sequence has no order (a
    nested type: Arrow sorts none), a change has no sequence or a key part is NULL (Spark's
    AUTO CDC refuses all three)."""
    batch = batch.cast(writable_schema(batch.schema))
    for name, part in zip(spec.sequence_names, spec.sequence, strict=True):
        data_type = batch.schema.field(part).type
        if pa.types.is_nested(data_type) or pa.types.is_null(data_type):
            raise error("APPLY_CHANGES.NON_ORDERABLE_SEQUENCE", column=name, dataType=data_type)
    missing = sum(batch.column(c).null_count for c in spec.sequence)
    if missing:
        raise error("APPLY_CHANGES.NULL_SEQUENCE", path=spec.target, count=missing)
    keyed = pc.not_equal(batch.column(OP), TRUNCATE)
    nulls = {k: pc.sum(pc.and_(keyed, pc.is_null(batch.column(k)))).as_py() or 0 for k in spec.keys}
    if any(nulls.values()):
        counts = ", ".join(f"{k}={n}" for k, n in nulls.items() if n)
        raise error("APPLY_CHANGES.NULL_KEY", path=spec.target, counts=counts)
    return batch


def _identities(spec: ApplySpec, batch: pa.Table) -> np.ndarray:
    """A hash of what each change sets (a delete sets nothing: every delete of a key at
    one sequence is the same change)."""
    values = [array(batch.column(c)) for c in spec.values]
    if not values or not batch.num_rows:
        return np.zeros(batch.num_rows, np.int64)
    hashed = rows_hash(values, "image").view(np.int64)
    return np.where(to_numpy(batch.column(OP)) == DELETE, 0, hashed)


def changes_of(spec: ApplySpec, batch: pa.Table, old: pa.Table) -> pa.Table:
    """The batch's changes and the state's in one table of the batch's columns (the
    state lacks the values when it does not keep them)."""
    fresh = batch.select([*spec.columns, *spec.sequence, OP, *_key_hash(batch.schema)])
    fresh = fresh.append_column(HASH, from_numpy(_identities(spec, batch)))
    fresh = fresh.append_column(NEW, pa.repeat(pa.scalar(True), batch.num_rows))
    fresh = fresh.append_column(APPLIED_AT, pa.nulls(batch.num_rows, APPLIED_AT_TYPE))
    columns: dict[str, Any] = {}
    for field in fresh.schema:
        if field.name == NEW:
            columns[field.name] = pa.repeat(pa.scalar(False), old.num_rows)
        elif field.name in old.column_names:
            columns[field.name] = old.column(field.name).cast(field.type)
        else:
            columns[field.name] = pa.nulls(old.num_rows, field.type)
    return pa.concat_tables([fresh, pa.table(columns, schema=fresh.schema)])


def target_schema(spec: ApplySpec, schema: pa.Schema) -> pa.Schema:
    fields = [schema.field(c) for c in spec.columns]
    if spec.scd_type == 2:
        parts = [schema.field(c).type for c in spec.sequence]
        if len(parts) == 1:
            sequence = parts[0]
        else:
            sequence = pa.struct(list(zip(spec.sequence_names, parts, strict=True)))
        fields += [pa.field(START_AT, sequence), pa.field(END_AT, sequence)]
    return writable_schema(pa.schema(fields))


def _key_hash(schema: pa.Schema) -> list[str]:
    """``KEY_HASH``, when the batch has it (a batch the client planned: ``buckets``)."""
    return [KEY_HASH] if KEY_HASH in schema.names else []


def state_schema(spec: ApplySpec, schema: pa.Schema) -> pa.Schema:
    names = spec.columns if spec.state_keeps_values else spec.keys
    fields = [schema.field(c) for c in (*names, *spec.sequence, OP, *_key_hash(schema))]
    fields += [pa.field(HASH, pa.int64()), pa.field(APPLIED_AT, APPLIED_AT_TYPE)]
    return writable_schema(pa.schema(fields))
