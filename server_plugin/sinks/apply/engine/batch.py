"""Applying one batch of prepared changes to the target, in any format (``formats``): the
batch checked, resolved with the state's changes of its keys (``history``), then
committed, the target first and the state second, each commit marked with the batch's
number. The resolving runs in the tasks when the feed is partitioned by key
(``resolve_share``, each task its keys; the commit, ``apply_shares``, writes them), else
in the commit (``apply_batch``).

Why that order is safe: a batch that reaches the target but not the state (the process
stopped between the two commits) is found applied to the target when it runs again, so
only the state is written then, from the same state as the first time, which the target
commit had not changed. A batch whose state commit is there is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, NoReturn

import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.sinks.apply.engine import binding
from spark_cdc.server_plugin.sinks.apply.engine.changes import (
    Outcome,
    changes_of,
    check_not_null,
    compacted_state,
    described,
    inserted,
    now,
    prepared,
    state_schema,
    target_schema,
    written_rows,
)
from spark_cdc.server_plugin.sinks.apply.engine.formats import TableFormat, Tables
from spark_cdc.server_plugin.sinks.apply.engine.history import Resolution, resolve
from spark_cdc.server_plugin.sinks.apply.engine.spec import OP, TRUNCATE, ApplySpec
from spark_cdc.server_plugin.sinks.apply.engine.staged import NOTHING, Staged
from spark_cdc.server_plugin.sinks.apply.engine.state_rows import supersedes

# How many of the state's newest commits are searched for the target it describes (its
# own batches' commits name it; another writer's compaction of the state does not), and of
# a target's whose state is gone for batches apply_changes applied (its first batch into a
# table of a long history reads no more than this).
BOUND_SEARCH = 20
_APPLIED_SEARCH = 100


def apply_batch(
    tables_format: TableFormat, spec: ApplySpec, batch: pa.Table, version: int, memory: Any = None
) -> Outcome:
    """Apply ``batch`` (the client's prepared feed) as this writer's ``version``, resolved
    here; ``memory``: what the format keeps of the state between a stream's micro-batches.
    Every refusal comes before the first write; a missing table is made by its first
    commit, so a refused batch leaves nothing."""
    spec, batch = prepared(spec, batch)
    opened = _opened(tables_format, spec, batch.schema, version)
    if opened.skipped:
        return Outcome(batch.num_rows, 0, 0, skipped=True)
    state = opened.tables.state
    if state is None or opened.rebuilds_state:  # a full refresh starts from no state
        old = opened.state_schema.empty_table()
    else:
        truncating = bool(pc.any(pc.equal(batch.column(OP), TRUNCATE)).as_py())
        keys = None if truncating else batch.select(list(spec.keys))
        old = tables_format.state_rows(state, spec, keys, memory)
    resolution = resolve(changes_of(spec, batch, old), spec, now())
    return _committed(tables_format, spec, version, opened, resolution, batch.num_rows, memory)


@dataclass(frozen=True)
class Share:
    """A task's share of a batch (every change of its keys) resolved in the task: where
    it read the state (``TableFormat.read_point``; None: no state yet), whether it
    resolved it as a full refresh's first batch (against no state: the commit replaces
    both tables), the batch's schema as the client's plan gave it, its changes and what
    they change (``apply_shares`` commits them)."""

    state: tuple[str, int] | None
    rebuilds: bool
    schema: pa.Schema
    changes: int
    resolution: Resolution
    staged: Staged = NOTHING


@dataclass(frozen=True)
class ShareTables:
    """The tables a task resolves its share against, opened and checked once for all the
    share's parts (``resolve_share``): one read point of the state for every part, and
    whether the share rebuilds both tables (a full refresh's first batch)."""

    found: Tables
    read: Any
    rebuilds: bool


def share_tables(
    tables_format: TableFormat, spec: ApplySpec, schema: pa.Schema
) -> ShareTables | None:
    """The tables for a share of a prepared batch of ``schema``, refused as the commit
    would refuse them. None: the commit resolves the batch whole (a refresh that finds one
    table marked by its writer and not the other, which only the batch's number tells
    apart)."""
    found = _tables(tables_format, spec, schema)
    rebuilds = False
    if binding.refreshing(spec):
        marked = [
            tables_format.last_batch(t, spec.app_id)
            for t in (found.target, found.state)
            if t is not None
        ]
        if any(m is not None for m in marked):
            if any(m is None for m in marked):
                return None
        else:
            rebuilds = True  # as ``_opened`` finds it: ``binding.rebuilds`` of both
    read = None if found.state is None else tables_format.read_point(found.state)
    return ShareTables(found, read, rebuilds)


def resolve_share(
    tables_format: TableFormat,
    spec: ApplySpec,
    batch: pa.Table,
    opened: list[ShareTables | None] | None = None,
) -> Share | None:
    """``batch`` (every change of its keys) resolved against the state's rows of its keys,
    read from the files that hold them (``TableFormat.share_rows``), or against none for a
    full refresh's first batch: a task's part of a batch. The rows it writes are staged
    into the tables where they can be, for the commit to name; nothing is committed.
    None: the commit resolves the batch whole (``share_tables``). ``opened``: the tables
    of the task's earlier parts (a spilled share's), kept there by the first."""
    given = batch.schema
    spec, batch = prepared(spec, batch)
    if opened is None:
        opened = []
    if not opened:
        opened.append(share_tables(tables_format, spec, batch.schema))
    tables = opened[0]
    if tables is None:
        return None
    found, state = tables.found, tables.found.state
    if state is None or tables.rebuilds:
        old = state_schema(spec, batch.schema).empty_table()
    else:
        first = batch.column(spec.sequence[0])
        earliest = pc.min(first) if supersedes(spec, first.type) else None
        buckets = tables_format.layout(state).buckets_of(batch)
        keys = batch.select(list(spec.keys))
        old = tables_format.share_rows(state, spec, keys, earliest, buckets)
    resolution = resolve(changes_of(spec, batch, old), spec, now())
    if found.target is not None:  # refused here: what is staged no longer travels
        check_not_null(tables_format.schema(found.target), spec, inserted(spec, resolution))
    schemas = (target_schema(spec, batch.schema), state_schema(spec, batch.schema))
    staged = tables_format.stage(spec, found, resolution, schemas, tables.rebuilds)
    return Share(tables.read, tables.rebuilds, given, batch.num_rows, *staged)


def apply_shares(
    tables_format: TableFormat, spec: ApplySpec, shares: list[Share], version: int
) -> Outcome:
    """Every task's ``Share`` of a batch committed as this writer's ``version``: the tasks
    resolved disjoint keys against the state as it is now (else another writer committed
    since: refused whole, nothing written)."""
    outcome = None
    try:
        outcome = _shares_committed(tables_format, spec, shares, version)
        return outcome
    finally:
        # Applied before (the files are in no commit), or failed (in none but the target's,
        # when it failed after the target's commit): the tasks' files no table holds go.
        if outcome is None or outcome.skipped:
            for share in shares:
                tables_format.discard(spec, share.staged, held=outcome is None)


def _shares_committed(
    tables_format: TableFormat, spec: ApplySpec, shares: list[Share], version: int
) -> Outcome:
    spec, empty = prepared(spec, shares[0].schema.empty_table())
    changes = sum(s.changes for s in shares)
    opened = _opened(tables_format, spec, empty.schema, version)
    if opened.skipped:
        return Outcome(changes, 0, 0, skipped=True)
    state = opened.tables.state
    read = None if state is None else tables_format.read_point(state)
    resolution, staged = joined(spec, shares, read, opened.rebuilds_state)
    return _committed(
        tables_format, spec, version, opened, resolution, changes, None, len(shares), staged
    )


def joined(
    spec: ApplySpec, shares: list[Share], read: tuple[str, int] | None, rebuilds_state: bool
) -> tuple[Resolution, Staged]:
    """The tasks' shares as one resolution, and the files they staged: the tasks resolved
    disjoint keys against the state as the commit finds it (``read``), as a refresh's
    first batch when the commit finds it one, else another writer committed since and the
    batch is refused whole."""
    whole = combined(spec, shares)
    if whole.state != read or whole.rebuilds != rebuilds_state:
        _refuse_moved_state(spec)
    return whole.resolution, whole.staged


def combined(spec: ApplySpec, shares: list[Share]) -> Share:
    """Shares of disjoint keys (the tasks', or one task's parts) as one, resolved against
    one state (else another writer committed to it meanwhile: refused whole)."""
    first = shares[0]
    if any(s.state != first.state or s.rebuilds != first.rebuilds for s in shares):
        _refuse_moved_state(spec)
    parts = [s.resolution for s in shares]
    resolution = Resolution(
        replaced=pa.concat_tables([p.replaced for p in parts]),
        rows=pa.concat_tables([p.rows for p in parts]),
        state=pa.concat_tables([p.state for p in parts]),
        truncated=False,
        kept=pa.concat_tables([p.kept for p in parts]),
        keys=sum(p.keys for p in parts),
    )
    staged = Staged.joined([s.staged for s in shares])
    changes = sum(s.changes for s in shares)
    return Share(first.state, first.rebuilds, first.schema, changes, resolution, staged)


def _refuse_moved_state(spec: ApplySpec) -> NoReturn:
    raise error(
        "APPLY_CHANGES.CONCURRENT_WRITE",
        path=spec.state,
        problem="another writer committed to the state while the batch was resolved",
    )


@dataclass(frozen=True)
class Opened:
    """The tables a batch (of ``schema``, prepared) goes to, their schemas, whether the
    batch is already applied, and which tables it rebuilds (a full refresh's first
    batch)."""

    schema: pa.Schema
    tables: Tables
    target_schema: pa.Schema
    state_schema: pa.Schema
    skipped: bool
    rebuilds_target: bool
    rebuilds_state: bool


def _tables(tables_format: TableFormat, spec: ApplySpec, schema: pa.Schema) -> Tables:
    """The target and the state for a batch of ``schema``, each checked against it (the
    target first: its refusals say what the state's would not, a target of the other SCD
    type), the state's layout too."""
    found = tables_format.tables(spec, target_schema(spec, schema), state_schema(spec, schema))
    if found.state is not None:
        tables_format.layout(found.state).check_batch(schema, spec.state)
    return found


def _opened(tables_format: TableFormat, spec: ApplySpec, schema: pa.Schema, version: int) -> Opened:
    """The tables for a batch of ``schema``, checked: every refusal of the tables comes
    here, before anything is written."""
    found = _tables(tables_format, spec, schema)
    target, state = found.target, found.state
    marked = [
        None if t is None else tables_format.last_batch(t, spec.app_id) for t in (target, state)
    ]
    last = max((m for m in marked if m is not None), default=None)
    rebuilds_target, rebuilds_state = (binding.rebuilds(spec, version, m, last) for m in marked)
    if not rebuilds_state:  # a refresh's first batch replaces whatever is there
        check_binding(tables_format, spec, target, state, version)
    if last is not None and version < last:
        if spec.from_snapshots:
            raise error(
                "APPLY_CHANGES.SNAPSHOT_VERSION_NOT_NEWER",
                path=spec.target,
                last=last,
                version=version,
            )
        # Spark runs a stream's last batch again after a restart, never an older one: the
        # checkpoint was replaced, and its batches are not the ones the marker counts.
        raise error("APPLY_CHANGES.CHECKPOINT_REPLACED", path=spec.target, last=last, batch=version)
    skipped = state is not None and _applied(tables_format, state, spec, version)  # written last
    if spec.snapshot_version is not None and not skipped:
        _check_snapshot_base(spec, version, *marked)
    return Opened(
        schema,
        found,
        target_schema(spec, schema),
        state_schema(spec, schema),
        skipped,
        rebuilds_target,
        rebuilds_state,
    )


def _check_snapshot_base(
    spec: ApplySpec, version: int, target_last: int | None, state_last: int | None
) -> None:
    """A snapshot's changes were computed against the target as the writer's last batch
    in the state (``spec.snapshot_base``) left it: another run that committed a snapshot
    since, or a snapshot other than the one stopped between its two commits, would be
    applied on top of rows its changes do not describe."""
    done = -1 if state_last is None else state_last
    if target_last is not None and target_last > done and version != target_last:
        raise error(
            "APPLY_CHANGES.SNAPSHOT_INTERRUPTED",
            path=spec.target,
            applied=target_last,
            version=version,
        )
    if done != spec.snapshot_base:
        raise error(
            "APPLY_CHANGES.CONCURRENT_WRITE",
            path=spec.state,
            problem=f"snapshot {done} was applied since this snapshot's changes were computed",
        )


def _applied(tables_format: TableFormat, table: Any, spec: ApplySpec, version: int) -> bool:
    """Whether this writer already committed ``version`` (its batch) to the table."""
    done = tables_format.last_batch(table, spec.app_id)
    return done is not None and done >= version


def check_binding(
    tables_format: TableFormat, spec: ApplySpec, target: Any, state: Any, version: int
) -> None:
    """The target is the table its state describes, and a target apply_changes wrote has
    its state (``binding``)."""
    found = None if target is None else tables_format.identity(target)
    outcomes = None
    if state is not None:
        outcomes = list(tables_format.outcomes(state, spec, BOUND_SEARCH))
        binding.check_kind(spec, outcomes)
    applied = partial(tables_format.outcomes, target, spec, _APPLIED_SEARCH)
    binding.check(spec, version, found, outcomes, applied)


def _committed(
    tables_format: TableFormat,
    spec: ApplySpec,
    version: int,
    opened: Opened,
    resolution: Resolution,
    changes: int,
    memory: Any,
    tasks: int = 0,
    staged: Staged = NOTHING,
) -> Outcome:
    """``resolution`` written, with the files the tasks ``staged``: the target first,
    then the state (see the module's docstring), each commit marked as this writer's
    ``version``, with what the batch did and how many tasks resolved it (0: the commit
    did)."""
    outcome = Outcome(changes, resolution.keys, written_rows(resolution) + staged.rows, False)
    marker = described(spec, version, outcome, tasks)
    found = opened.tables
    target, state = found.target, found.state
    if target is None:
        rows = inserted(spec, resolution)
        schema = opened.target_schema
        tables_format.create_target(spec, found, schema, version, rows, marker, staged)
    elif opened.rebuilds_target:  # one commit replacing every row: older versions stay
        rows = inserted(spec, resolution)
        check_not_null(tables_format.schema(target), spec, rows)
        tables_format.replace_target(spec, target, version, rows, marker, staged)
    elif _changes_target(resolution, staged) and not _applied(tables_format, target, spec, version):
        check_not_null(tables_format.schema(target), spec, inserted(spec, resolution))
        tables_format.change_target(spec, target, version, resolution, marker, staged)
    else:  # the target has the batch already
        tables_format.discard(spec, Staged(target=staged.target), held=False)
    # The state's commit names its target.
    marker = tables_format.identity(tables_format.target_after(spec, found)).within(marker)
    if state is None:
        schema, rows = opened.state_schema, resolution.state
        tables_format.create_state(spec, found, schema, version, rows, marker, staged, memory)
        return outcome
    if resolution.truncated or opened.rebuilds_state:
        rows = resolution.state
        tables_format.replace_state(spec, state, version, rows, marker, staged, memory)
    else:
        rows = resolution.state
        tables_format.append_state(spec, state, version, rows, marker, staged, memory)
    if tables_format.small_files(state) > spec.compact_after_files:
        _compact(tables_format, state, spec, opened.schema, memory)
    return outcome


def _changes_target(resolution: Resolution, staged: Staged) -> bool:
    """Whether the batch changes the target: one that does not commits nothing to it (the
    state's commit alone records the batch: a run again after a stop between the two finds
    nothing to write to the target either)."""
    written = resolution.rows.num_rows or resolution.replaced.num_rows or staged.target
    return resolution.truncated or bool(written)


def _compact(
    tables_format: TableFormat, state: Any, spec: ApplySpec, schema: pa.Schema, memory: Any
) -> None:
    """The state grows by files every batch; past ``compact_after_files`` small ones, so
    that finding a batch's keys does not slow with a stream's age, type 1's is rewritten
    with what it must keep (``compacted_state``), and type 2's (which keeps every change: a
    late one replays its key's history) has its small files merged. Either is a commit
    without a marker: compacting twice keeps the same changes."""
    if spec.scd_type == 2:
        tables_format.merge_small_files(state, memory)
        return
    stored = tables_format.state_rows(state, spec, None, memory)
    compacted = compacted_state(spec, schema, stored)
    tables_format.replace_state(spec, state, None, compacted, None, NOTHING, memory)
