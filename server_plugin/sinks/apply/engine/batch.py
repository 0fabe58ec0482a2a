"""Applying one batch of prepared changes to the target: the batch checked, resolved with
the state's changes of its keys (``history``), then committed, the target first and the
state second, each commit marked with the batch's number. The resolving runs in the tasks
when the feed is partitioned by key (``resolve_share``, each task its keys; the commit,
``apply_shares``, writes them), else in the commit (``apply_batch``).

Why that order is safe: a batch that reaches the target but not the state (the process
stopped between the two commits) is found applied to the target when it runs again, so
only the state is written then, from the same state as the first time, which the target
commit had not changed. A batch whose state commit is there is skipped.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.arrow_types import from_numpy, to_numpy
from spark_cdc.server_plugin.delta import committer
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.row_level.arrays import array
from spark_cdc.server_plugin.row_level.hashing import rows_hash
from spark_cdc.server_plugin.sinks.apply.delta import direct_commits, staging, tables
from spark_cdc.server_plugin.sinks.apply.delta import state as state_table
from spark_cdc.server_plugin.sinks.apply.delta.staging import Staged
from spark_cdc.server_plugin.sinks.apply.delta.state import StateMemory
from spark_cdc.server_plugin.sinks.apply.engine import binding
from spark_cdc.server_plugin.sinks.apply.engine.binding import Bound
from spark_cdc.server_plugin.sinks.apply.engine.buckets import Layout
from spark_cdc.server_plugin.sinks.apply.engine.history import (
    ALIVE,
    APPLIED_AT,
    HASH,
    NEW,
    Resolution,
    compacted,
    resolve,
)
from spark_cdc.server_plugin.sinks.apply.engine.spec import (
    DELETE,
    DELETION_VECTORS_PROPERTY,
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


def apply_batch(
    spec: ApplySpec, batch: pa.Table, version: int, memory: StateMemory | None = None
) -> Outcome:
    """Apply ``batch`` (the client's prepared feed) as this writer's ``version``, resolved
    here; ``memory``: a stream writer's copy of the state, kept between its micro-batches.
    Every refusal comes before the first write; a missing table is made by its first
    commit, so a refused batch leaves no folder."""
    spec, batch = prepared(spec, batch)
    opened = _opened(spec, batch.schema, version)
    if opened.skipped:
        return Outcome(batch.num_rows, 0, 0, skipped=True)
    ops = to_numpy(batch.column(OP))
    truncating = bool((ops == TRUNCATE).any())
    state = opened.state
    if state is None or opened.rebuilds_state:  # a full refresh starts from no state
        if memory is not None:
            memory.forget()
        old = opened.state_schema.empty_table()
    else:
        old = state_table.read(state, spec, batch.select(list(spec.keys)), truncating, memory)
    resolution = resolve(changes_of(spec, batch, old), spec, now())
    return _committed(spec, version, opened, resolution, batch.num_rows, memory, tasks=0)


@dataclass(frozen=True)
class Share:
    """A task's share of a batch (every change of its keys) resolved in the task: what it
    read of the state (its table id and version; None: no state yet), the batch's schema
    as the client's plan gave it, its changes and what they change (``apply_shares``
    commits them)."""

    state: tuple[str, int] | None
    schema: pa.Schema
    changes: int
    resolution: Resolution
    staged: Staged = staging.NOTHING


def resolve_share(spec: ApplySpec, batch: pa.Table) -> Share | None:
    """``batch`` (every change of its keys) resolved against the state's rows of its keys,
    read from the files that hold them (``state.rows_of``): a task's part of a batch.
    The rows it writes are staged into the tables' folders where they can be (``_staged``),
    for the commit to name; nothing is committed. None: the batch rebuilds the state (a
    full refresh), which its commit resolves whole."""
    given = batch.schema
    spec, batch = prepared(spec, batch)
    target, state = _tables(spec, batch.schema)  # refused as the commit would refuse it
    if binding.refreshing(spec) and (
        state is None or state.transaction_version(spec.app_id) is None
    ):
        return None  # the commit rebuilds the state, or refuses it deleted by hand
    if state is None:
        old, read = state_schema(spec, batch.schema).empty_table(), None
    else:
        first = batch.column(spec.sequence[0])
        earliest = None
        if state_table.supersedes(spec, first.type):
            earliest = pc.min(first)
        buckets = Layout.of(state).buckets_of(batch)
        keys = batch.select(list(spec.keys))
        old = state_table.rows_of(state, spec, keys, earliest, buckets)
        read = (state.metadata().id, state.version())
    resolution = resolve(changes_of(spec, batch, old), spec, now())
    return Share(read, given, batch.num_rows, *_staged(spec, target, state, resolution))


def _staged(
    spec: ApplySpec, target: Any, state: Any, resolution: Resolution
) -> tuple[Resolution, Staged]:
    """A task's rows written where the commit will only name them (``staging``): the
    target's new rows when the target takes direct commits, the state's when its schema
    holds them, each on a local filesystem. What is staged no longer travels: its table
    is left empty in the resolution."""
    rows, state_rows = resolution.rows, resolution.state
    to_target: tuple[dict[str, Any], ...] = ()
    to_state: tuple[dict[str, Any], ...] = ()
    new_rows = inserted(spec, resolution)
    if target is not None and _commits_directly(target, new_rows):
        check_not_null(tables.table_schema(target), spec, new_rows)
        schema = tables.table_schema(target)
        aligned = tables.by_key(tables.aligned(new_rows, schema), spec.keys)
        to_target = direct_commits.staged_rows(target, aligned, spec.keys)
        rows = rows.slice(0, 0)
    if state is not None and state_rows.num_rows and staging.stages(spec.state):
        schema, layout = tables.table_schema(state), Layout.of(state)
        laid = layout.rows(state_rows)
        if set(laid.column_names) <= set(schema.names):
            aligned = tables.by_key(tables.aligned(laid, schema), spec.keys)
            keyed = (*spec.keys, KEY_HASH, HASH)  # a value per key or row: no dictionary
            to_state = staging.staged_files(spec.state, aligned, layout.partition_by, keys=keyed)
            state_rows = state_rows.slice(0, 0)
    count = new_rows.num_rows if to_target else 0  # else the rows travel: the commit counts
    resolved = dataclasses.replace(resolution, rows=rows, state=state_rows)
    return resolved, Staged(to_target, to_state, count)


def apply_shares(
    spec: ApplySpec,
    shares: list[Share],
    version: int,
    commit: Callable[[ApplySpec, list[Share], int], Outcome] | None = None,
) -> Outcome:
    """Every task's ``Share`` of a batch committed as this writer's ``version`` (by
    ``commit``: an Iceberg target's, ``iceberg_shares``): the tasks resolved disjoint keys
    against the state as it is now (else another writer committed since: refused whole,
    nothing written)."""
    outcome = None
    try:
        outcome = (commit or _shares_committed)(spec, shares, version)
        return outcome
    finally:
        # Applied before (the files are in no commit), or failed (in none but the target's,
        # when it failed after the target's commit): the tasks' files no table holds go.
        if outcome is None or outcome.skipped:
            for share in shares:
                share.staged.discarded(spec, held=outcome is None)


def _shares_committed(spec: ApplySpec, shares: list[Share], version: int) -> Outcome:
    spec, empty = prepared(spec, shares[0].schema.empty_table())
    changes = sum(s.changes for s in shares)
    opened = _opened(spec, empty.schema, version)
    if opened.skipped:
        return Outcome(changes, 0, 0, skipped=True)
    state = opened.state
    read = None if state is None else (state.metadata().id, state.version())
    resolution, staged = joined(spec, shares, read, opened.rebuilds_state)
    return _committed(spec, version, opened, resolution, changes, None, len(shares), staged)


def joined(
    spec: ApplySpec, shares: list[Share], read: tuple[str, int] | None, rebuilds_state: bool
) -> tuple[Resolution, Staged]:
    """The tasks' shares as one resolution, and the files they staged: the tasks resolved
    disjoint keys against the state as the commit finds it (``read``: its id and version),
    else another writer committed since and the batch is refused whole (as it is when the
    commit rebuilds the state)."""
    if rebuilds_state or any(s.state != read for s in shares):
        raise error(
            "APPLY_CHANGES.CONCURRENT_WRITE",
            path=spec.state,
            problem="another writer committed to the state while the batch was resolved",
        )
    parts = [s.resolution for s in shares]
    resolution = Resolution(
        replaced=pa.concat_tables([p.replaced for p in parts]),
        rows=pa.concat_tables([p.rows for p in parts]),
        state=pa.concat_tables([p.state for p in parts]),
        truncated=False,
        kept=pa.concat_tables([p.kept for p in parts]),
        keys=sum(p.keys for p in parts),
    )
    return resolution, Staged.joined([s.staged for s in shares])


def prepared(spec: ApplySpec, batch: pa.Table) -> tuple[ApplySpec, pa.Table]:
    """The spec and batch as the rules take them: a struct sequence as its fields, the
    batch checked (``_checked``)."""
    spec, batch = _struct_sequence_flattened(spec, batch)
    return spec, _checked(spec, batch)


@dataclass(frozen=True)
class Opened:
    """The target and state a batch (of ``schema``, prepared) goes to (None: not made
    yet), their schemas, whether the batch is already applied, which tables it rebuilds
    (a full refresh's first batch), and an Iceberg target's catalog (``found``)."""

    schema: pa.Schema
    target: Any
    state: Any
    target_schema: pa.Schema
    state_schema: pa.Schema
    skipped: bool
    rebuilds_target: bool
    rebuilds_state: bool
    found: Any = None


def _opened(spec: ApplySpec, schema: pa.Schema, version: int) -> Opened:
    """The tables for a batch of ``schema``, checked: every refusal of the tables comes
    here, before anything is written."""
    target, state = _tables(spec, schema)
    marked = [None if t is None else t.transaction_version(spec.app_id) for t in (target, state)]
    last = max((m for m in marked if m is not None), default=None)
    rebuilds_target, rebuilds_state = (binding.rebuilds(spec, version, m, last) for m in marked)
    if not rebuilds_state:  # a refresh's first batch replaces whatever is there
        _check_binding(spec, target, state, version)
    if last is not None and version < last:
        # Spark runs a stream's last batch again after a restart, never an older one: the
        # checkpoint was replaced, and its batches are not the ones the marker counts.
        raise error("APPLY_CHANGES.CHECKPOINT_REPLACED", path=spec.target, last=last, batch=version)
    skipped = state is not None and tables.applied(state, spec, version)  # written last
    target_columns, state_columns = target_schema(spec, schema), state_schema(spec, schema)
    return Opened(
        schema,
        target,
        state,
        target_columns,
        state_columns,
        skipped,
        rebuilds_target,
        rebuilds_state,
    )


# How many of the state's newest commits are searched for the target it describes (its
# own batches' commits name it; another writer's compaction of the state does not), and of
# a target's whose state is gone for batches apply_changes applied (its first batch into a
# table of a long history reads no more than this).
_BOUND_SEARCH = 20
_APPLIED_SEARCH = 100


def _check_binding(spec: ApplySpec, target: Any, state: Any, version: int) -> None:
    """The target is the table its state describes, and a target apply_changes wrote has
    its state (``binding``)."""
    found = None if target is None else _bound(target)
    outcomes = None if state is None else tables.outcomes(state, spec, _BOUND_SEARCH)
    applied = partial(tables.outcomes, target, spec, _APPLIED_SEARCH)
    binding.check(spec, version, found, outcomes, applied)


def _bound(target: Any) -> Bound:
    return Bound(target.metadata().id, target.version())


def _tables(spec: ApplySpec, schema: pa.Schema) -> tuple[Any, Any]:
    """The target and the state for a batch of ``schema`` (None: not made yet), each
    checked against it, the target first (its refusals say what the state's would not: a
    target of the other SCD type)."""
    target = tables.existing(spec.target, target_schema(spec, schema), spec, "target")
    if target is None and spec.target_name is not None:
        raise error("APPLY_CHANGES.TARGET_NOT_DELTA", table=spec.target_name, path=spec.target)
    state = tables.existing(spec.state, state_schema(spec, schema), spec, "state")
    if state is not None:
        Layout.of(state).check_batch(schema, spec.state)
    return target, state


def now() -> pa.Scalar:
    return pa.scalar(int(time.time() * 1_000_000), pa.int64()).cast(APPLIED_AT_TYPE)


def _committed(
    spec: ApplySpec,
    version: int,
    opened: Opened,
    resolution: Resolution,
    changes: int,
    memory: StateMemory | None,
    tasks: int,
    staged: Staged = staging.NOTHING,
) -> Outcome:
    """``resolution`` written, with the files the tasks ``staged``: the target first,
    then the state (see the module's docstring), each commit marked as this writer's
    ``version``, with what the batch did and how many tasks resolved it (0: the commit
    did)."""
    outcome = Outcome(changes, resolution.keys, written_rows(resolution) + staged.rows, False)
    marked = described(spec, version, outcome, tasks)
    target, state = opened.target, opened.state
    if target is None:
        rows = inserted(spec, resolution)
        _create_target(spec, opened.target_schema, version, rows, marked)
        target = tables.opened(spec.target, spec)
    elif opened.rebuilds_target:  # one commit replacing every row: older versions stay
        rows = inserted(spec, resolution)
        check_not_null(tables.table_schema(target), spec, rows)
        tables.overwrite_rows(target, spec, version, rows, marked)
        target.update_incremental()
    elif _changes_target(resolution, staged) and not tables.applied(target, spec, version):
        _write_target(target, spec, version, resolution, marked, staged.target)
        target.update_incremental()
    else:
        staging.discard(spec.target, staged.target)  # the target has the batch already
    marked = _bound(target).within(marked)  # the state's commit names its target
    if state is None:
        state_table.create(spec, opened.state_schema, version, resolution.state, memory, marked)
        return outcome
    if resolution.truncated or opened.rebuilds_state:
        state_table.overwrite(state, spec, version, resolution.state, memory, marked)
    elif staged.state:
        tables.append_staged(state, spec, version, staged.state, marked)
    else:
        state_table.append(state, spec, version, resolution.state, memory, marked)
    if tables.small_file_count(state) > spec.compact_after_files:
        _compact(state, spec, opened.schema, memory)
    return outcome


def _changes_target(resolution: Resolution, staged: Staged) -> bool:
    """Whether the batch changes the target: one that does not commits nothing to it (the
    state's commit alone records the batch: a run again after a stop between the two finds
    nothing to write to the target either)."""
    written = resolution.rows.num_rows or resolution.replaced.num_rows or staged.target
    return resolution.truncated or bool(written)


def inserted(spec: ApplySpec, resolution: Resolution) -> pa.Table:
    """The rows the batch adds to the target (type 1: those of its changed keys that are
    there after it)."""
    rows = resolution.rows
    if spec.scd_type == 2:
        return rows
    return rows.filter(rows.column(ALIVE)).drop_columns([ALIVE])


def described(spec: ApplySpec, version: int, outcome: Outcome, tasks: int) -> str:
    """The outcome as the tables' commits keep it (``tables.OUTCOME_KEY``), with the
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


def _write_target(
    target: Any,
    spec: ApplySpec,
    version: int,
    resolution: Resolution,
    outcome: str,
    staged: tuple[dict[str, Any], ...] = (),
) -> None:
    """The batch's target commit, with the files of its rows the tasks ``staged`` (on
    the path of direct commits, which each task found the target takes)."""
    rows = inserted(spec, resolution)
    check_not_null(tables.table_schema(target), spec, rows)
    direct = not resolution.truncated and _commits_directly(target, rows)
    if staged and not direct:
        raise error(
            "APPLY_CHANGES.CONCURRENT_WRITE",
            path=spec.target,
            problem="another writer changed the target's properties while the batch was resolved",
        )
    if direct:
        schema = tables.table_schema(target)
        replaced = resolution.replaced  # type 1: the changed keys; type 2: their versions
        direct_commits.replace_rows(
            target, spec, version, replaced, tables.aligned(rows, schema), outcome, staged
        )
    elif spec.scd_type == 2:
        tables.replace_rows(target, spec, version, resolution.replaced, rows, outcome=outcome)
    elif resolution.truncated:
        tables.replace_rows(
            target, spec, version, resolution.replaced, rows, resolution.kept, outcome
        )
    else:
        tables.upsert_rows(target, spec, version, resolution.rows, outcome)


def _create_target(
    spec: ApplySpec, schema: pa.Schema, version: int, rows: pa.Table, outcome: str
) -> None:
    """The target, made by the batch's first commit: with deletion vectors when its
    properties turn them on and this package can commit them, else by delta-rs. Its
    properties go to delta-rs without ``delta.enableDeletionVectors``: given it, delta-rs
    also declares the variant type, which readers without variant support then refuse."""
    properties = {k: v for k, v in spec.table_properties if k != DELETION_VECTORS_PROPERTY}
    if spec.deletion_vectors and committer.can_commit(spec.target):
        direct_commits.create(spec, tables.aligned(rows, schema), version, outcome, properties)
        return
    partition_by = list(spec.partition_cols)
    tables.created(spec.target, schema, spec, version, rows, outcome, properties, partition_by)


def _commits_directly(target: Any, rows: pa.Table) -> bool:
    """Whether the batch's target commit is written here (``direct_commits``): the
    target allows it, and the batch brings no new column (that changes the table's
    schema)."""
    if direct_commits.refusal(target) is not None:
        return False
    return not set(rows.column_names) - set(tables.table_schema(target).names)


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


def _compact(state: Any, spec: ApplySpec, schema: pa.Schema, memory: StateMemory | None) -> None:
    """The state grows by a file per batch; past ``compact_after_files`` small ones, so
    that finding a batch's keys does not slow with a stream's age, type 1's is rewritten
    with what it must keep (``compacted_state``), and type 2's (which keeps every change: a
    late one replays its key's history) has its small files merged. Either is a commit
    without a marker: compacting twice keeps the same changes."""
    if spec.scd_type == 2:
        state_table.merge_small_files(state, memory)
        return
    stored = state_table.read(state, spec, None, True, memory)
    state_table.overwrite(state, spec, None, compacted_state(spec, schema, stored), memory)


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
    batch = batch.cast(tables.delta_schema(batch.schema))
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
    return tables.delta_schema(pa.schema(fields))


def _key_hash(schema: pa.Schema) -> list[str]:
    """``KEY_HASH``, when the batch has it (a batch the client planned: ``buckets``)."""
    return [KEY_HASH] if KEY_HASH in schema.names else []


def state_schema(spec: ApplySpec, schema: pa.Schema) -> pa.Schema:
    names = spec.columns if spec.state_keeps_values else spec.keys
    fields = [schema.field(c) for c in (*names, *spec.sequence, OP, *_key_hash(schema))]
    fields += [pa.field(HASH, pa.int64()), pa.field(APPLIED_AT, APPLIED_AT_TYPE)]
    return tables.delta_schema(pa.schema(fields))
