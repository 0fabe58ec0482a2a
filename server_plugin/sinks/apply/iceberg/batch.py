"""Applying one batch to an Iceberg target: the rules and the order of a Delta target's
(``batch``: the batch checked, resolved with the state's changes of its keys by ``history``,
the target committed first and the state second, each commit marked with the batch's
number), through ``iceberg_tables``. A batch is resolved whole here (``apply_batch``: a feed
with truncates, a full refresh's first batch), or by the tasks, each its keys
(``iceberg_shares``), whose files ``committed`` adds.

Why the order is safe is ``batch``'s argument: a batch found in the target but not in the
state is written to the state alone, from the state the first run read.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.sinks.apply.delta import staging
from spark_cdc.server_plugin.sinks.apply.delta.staging import Staged
from spark_cdc.server_plugin.sinks.apply.engine import binding
from spark_cdc.server_plugin.sinks.apply.engine.batch import (
    Opened,
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
from spark_cdc.server_plugin.sinks.apply.engine.binding import Bound
from spark_cdc.server_plugin.sinks.apply.engine.history import Resolution, resolve
from spark_cdc.server_plugin.sinks.apply.engine.spec import OP, TRUNCATE, ApplySpec
from spark_cdc.server_plugin.sinks.apply.iceberg import rewrites, tables
from spark_cdc.server_plugin.sinks.apply.iceberg import state as iceberg_state
from spark_cdc.server_plugin.sinks.apply.iceberg.deletes import merges_on_read

# How many of a target's newest snapshots are searched for batches apply_changes applied,
# when its state is gone (as ``batch._APPLIED_SEARCH``).
_APPLIED_SEARCH = 100


def opened(spec: ApplySpec, schema: pa.Schema, version: int) -> Opened:
    """The tables for a batch of ``schema``, checked: every refusal of the tables comes
    here, before anything is written."""
    found, target, state = checked_tables(spec, schema)
    marked = [None if t is None else tables.last_batch(t, spec.app_id) for t in (target, state)]
    last = max((m for m in marked if m is not None), default=None)
    rebuilds_target, rebuilds_state = (binding.rebuilds(spec, version, m, last) for m in marked)
    if not rebuilds_state:  # a refresh's first batch replaces whatever is there
        _check_binding(spec, target, state, version)
    if last is not None and version < last:
        # Spark runs a stream's last batch again after a restart, never an older one.
        raise error("APPLY_CHANGES.CHECKPOINT_REPLACED", path=spec.target, last=last, batch=version)
    skipped = state is not None and tables.applied(state, spec, version)  # written last
    return Opened(
        schema,
        target,
        state,
        target_schema(spec, schema),
        state_schema(spec, schema),
        skipped,
        rebuilds_target,
        rebuilds_state,
        found,
    )


def checked_tables(spec: ApplySpec, schema: pa.Schema) -> tuple[Any, Any | None, Any | None]:
    """The catalog, and the target and the state for a batch of ``schema`` (None: not
    made yet), each checked against it."""
    wanted = {"target": target_schema(spec, schema), "state": state_schema(spec, schema)}

    def load(catalog: Any, name: str, role: str) -> Any | None:
        return tables.existing(catalog, name, wanted[role], spec, role)

    found, target, state = tables.located(spec, load)
    if target is None:  # the first batch makes it with these properties
        asked = dict(spec.table_properties)
        version = asked.get("format-version", "2").strip()
        merges_on_read(spec.target, asked, int(version) if version.isdigit() else 2)
    if state is not None:
        iceberg_state.layout(state).check_batch(schema, spec.state)
    return found, target, state


def apply_batch(spec: ApplySpec, batch: pa.Table, version: int) -> Outcome:
    """Apply ``batch`` (the client's prepared feed) as this writer's ``version``, resolved
    here. Every refusal comes before the first write; a missing table is made by its first
    commit."""
    spec, batch = prepared(spec, batch)
    tables_for = opened(spec, batch.schema, version)
    if tables_for.skipped:
        return Outcome(batch.num_rows, 0, 0, skipped=True)
    truncating = bool(pc.any(pc.equal(batch.column(OP), TRUNCATE)).as_py())
    state = tables_for.state
    if state is None or tables_for.rebuilds_state:  # a full refresh starts from no state
        old = tables_for.state_schema.empty_table()
    else:
        keys = None if truncating else batch.select(list(spec.keys))
        old = iceberg_state.rows_of(state, spec, keys)
    resolution = resolve(changes_of(spec, batch, old), spec, now())
    return committed(spec, version, tables_for, resolution, batch.num_rows, 0)


def committed(
    spec: ApplySpec,
    version: int,
    tables_for: Opened,
    resolution: Resolution,
    changes: int,
    tasks: int,
    staged: Staged = staging.NOTHING,
) -> Outcome:
    """``resolution`` written, with the files the tasks ``staged``: the target first, then
    the state (``batch``'s order), each snapshot marked as this writer's ``version``, with
    what the batch did and how many tasks resolved it (0: the commit did)."""
    outcome = Outcome(changes, resolution.keys, written_rows(resolution) + staged.rows, False)
    marker = described(spec, version, outcome, tasks)
    found, target, state = tables_for.found, tables_for.target, tables_for.state
    if target is None:
        rows = inserted(spec, resolution)
        properties = dict(spec.table_properties)
        tables.created(
            found,
            spec.target,
            tables_for.target_schema,
            spec,
            version,
            rows,
            marker,
            "target",
            properties,
        )
    elif tables_for.rebuilds_target:  # one snapshot replacing every row: older ones stay readable
        rows = inserted(spec, resolution)
        check_not_null(tables.table_schema(target), spec, rows)
        rewrites.overwrite_rows(target, spec, version, rows, marker, staged.target)
    elif _changes_target(resolution, staged) and not tables.applied(target, spec, version):
        _write_target(target, spec, version, resolution, marker, staged)
    else:
        iceberg_state.discard(spec, staged.target)  # the target has the batch already
    marker = Bound(*tables.identity(found.load_table(spec.target))).within(marker)
    if state is None:
        iceberg_state.create(
            found, spec, tables_for.state_schema, version, resolution.state, marker
        )
    elif resolution.truncated or tables_for.rebuilds_state:
        iceberg_state.overwrite(state, spec, version, resolution.state, marker)
    else:
        iceberg_state.append(state, spec, version, resolution.state, marker, staged.state)
        if tables.data_file_count(state) > spec.compact_after_files:  # as committed
            _compact(state, spec, tables_for.schema)
    return outcome


def _check_binding(spec: ApplySpec, target: Any, state: Any, version: int) -> None:
    """The target is the table its state describes, and a target apply_changes wrote has
    its state (``binding``), as a Delta target's (``batch``)."""
    found = None if target is None else Bound(*tables.identity(target))
    outcomes = None if state is None else tables.every_outcome(state)

    def applied() -> Iterator[str]:
        return islice(tables.every_outcome(target), _APPLIED_SEARCH)

    binding.check(spec, version, found, outcomes, applied)


def _changes_target(resolution: Resolution, staged: Staged) -> bool:
    """Whether the batch changes the target: one that does not commits nothing to it (the
    state's commit alone records the batch)."""
    written = resolution.rows.num_rows or resolution.replaced.num_rows or staged.target
    return resolution.truncated or bool(written)


def _write_target(
    target: Any,
    spec: ApplySpec,
    version: int,
    resolution: Resolution,
    outcome: str,
    staged: Staged,
) -> None:
    """The batch's target snapshot: type 1 replaces its changed keys' rows by those alive
    after it, type 2 the versions it changed; a truncate keeps only ``kept``'s keys. The
    tasks' ``staged`` files hold new rows too."""
    rows = inserted(spec, resolution)
    check_not_null(tables.table_schema(target), spec, rows)
    kept = resolution.kept if resolution.truncated else None
    replaced = resolution.replaced
    rewrites.replace_rows(
        target, spec, version, replaced, rows, kept, outcome, staged.target, staged.keys
    )


def _compact(state: Any, spec: ApplySpec, schema: pa.Schema) -> None:
    """The state grows by files every batch; past ``compact_after_files``, so that reading
    it does not slow with a stream's age, type 1's is rewritten in one snapshot without a
    marker with the changes that still decide a key (``compacted_state``), and type 2's
    (which keeps every change: a late one replays its key's history) has its small files
    merged (``iceberg_state.merge_small_files``), its large ones left as they are."""
    if spec.scd_type == 2:
        iceberg_state.merge_small_files(state)
        return
    stored = iceberg_state.rows_of(state, spec, None)
    iceberg_state.overwrite(state, spec, None, compacted_state(spec, schema, stored))
