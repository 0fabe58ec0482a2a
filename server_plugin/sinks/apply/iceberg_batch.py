"""Applying one batch to an Iceberg target: the rules and the order of a Delta target's
(``batch``: the batch checked, resolved with the state's changes of its keys by ``history``,
the target committed first and the state second, each commit marked with the batch's
number), through ``iceberg_tables``. The batch is resolved whole in the commit (the driver's
Python process): the tasks hand their rows back, as for a feed with truncates.

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
from spark_cdc.server_plugin.sinks.apply import binding
from spark_cdc.server_plugin.sinks.apply import iceberg_tables as tables
from spark_cdc.server_plugin.sinks.apply.batch import (
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
from spark_cdc.server_plugin.sinks.apply.binding import Bound
from spark_cdc.server_plugin.sinks.apply.history import Resolution, resolve
from spark_cdc.server_plugin.sinks.apply.spec import KEY_HASH, OP, TRUNCATE, ApplySpec

# How many of a target's newest snapshots are searched for batches apply_changes applied,
# when its state is gone (as ``batch._APPLIED_SEARCH``).
_APPLIED_SEARCH = 100


def apply_batch(spec: ApplySpec, batch: pa.Table, version: int) -> Outcome:
    """Apply ``batch`` (the client's prepared feed) as this writer's ``version``. Every
    refusal comes before the first write; a missing table is made by its first commit."""
    spec, batch = prepared(spec, batch)
    if KEY_HASH in batch.column_names:  # the state is not laid out by key bucket here
        batch = batch.drop_columns([KEY_HASH])
    wanted_target = target_schema(spec, batch.schema)
    wanted_state = state_schema(spec, batch.schema)
    wanted = {"target": wanted_target, "state": wanted_state}

    def load(catalog: Any, name: str, role: str) -> Any | None:
        return tables.existing(catalog, name, wanted[role], spec, role)

    found, target, state = tables.located(spec, load)
    marked = [None if t is None else tables.last_batch(t, spec.app_id) for t in (target, state)]
    last = max((m for m in marked if m is not None), default=None)
    rebuilds_target, rebuilds_state = (binding.rebuilds(spec, version, m, last) for m in marked)
    if not rebuilds_state:  # a refresh's first batch replaces whatever is there
        _check_binding(spec, target, state, version)
    if last is not None and version < last:
        # Spark runs a stream's last batch again after a restart, never an older one.
        raise error("APPLY_CHANGES.CHECKPOINT_REPLACED", path=spec.target, last=last, batch=version)
    if state is not None and tables.applied(state, spec, version):
        return Outcome(batch.num_rows, 0, 0, skipped=True)
    truncating = bool(pc.any(pc.equal(batch.column(OP), TRUNCATE)).as_py())
    if state is None or rebuilds_state:  # a full refresh starts from no state
        old = wanted_state.empty_table()
    else:
        old = _state_rows(state, spec, None if truncating else batch.select(list(spec.keys)))
    resolution = resolve(changes_of(spec, batch, old), spec, now())
    outcome = Outcome(batch.num_rows, resolution.keys, written_rows(resolution), False)
    marker = described(spec, version, outcome, 0)
    if target is None:
        rows = inserted(spec, resolution)
        properties = dict(spec.table_properties)
        tables.created(
            found, spec.target, wanted_target, spec, version, rows, marker, "target", properties
        )
    elif rebuilds_target:  # one snapshot replacing every row: older ones stay readable
        rows = inserted(spec, resolution)
        check_not_null(tables.table_schema(target), spec, rows)
        tables.overwrite_rows(target, spec, version, rows, marker)
    elif _changes_target(resolution) and not tables.applied(target, spec, version):
        _write_target(target, spec, version, resolution, marker)
    marker = Bound(*tables.identity(found.load_table(spec.target))).within(marker)
    if state is None:
        tables.created(
            found, spec.state, wanted_state, spec, version, resolution.state, marker, "state"
        )
    elif resolution.truncated or rebuilds_state:
        tables.overwrite_rows(state, spec, version, resolution.state, marker)
    else:
        tables.append_rows(state, spec, version, resolution.state, marker)
        if tables.data_file_count(state) > spec.compact_after_files:  # as committed
            _compact(state, spec, batch.schema)
    return outcome


def _check_binding(spec: ApplySpec, target: Any, state: Any, version: int) -> None:
    """The target is the table its state describes, and a target apply_changes wrote has
    its state (``binding``), as a Delta target's (``batch``)."""
    found = None if target is None else Bound(*tables.identity(target))
    outcomes = None if state is None else tables.every_outcome(state)

    def applied() -> Iterator[str]:
        return islice(tables.every_outcome(target), _APPLIED_SEARCH)

    binding.check(spec, version, found, outcomes, applied)


def _state_rows(state: Any, spec: ApplySpec, keys: pa.Table | None) -> pa.Table:
    """The state's changes of ``keys`` (by the first key: a superset, and a change of
    another key resolves to no change) and its truncate (a NULL key); all of it when
    ``keys`` is None."""
    from pyiceberg.expressions import AlwaysTrue, Or

    first = spec.keys[0]
    if keys is None:
        return tables.scanned(state, AlwaysTrue())
    declared = tables.declared(keys, keys.slice(0, 0), spec.keys)
    rows = tables.scanned(state, Or(declared, tables.expression("IsNull", first)))
    values = keys.column(first).cast(rows.schema.field(first).type)
    wanted = pc.or_(
        pc.is_in(rows.column(first), value_set=values), pc.equal(rows.column(OP), TRUNCATE)
    )
    return rows.filter(pc.fill_null(wanted, False))


def _changes_target(resolution: Resolution) -> bool:
    """Whether the batch changes the target: one that does not commits nothing to it (the
    state's commit alone records the batch)."""
    written = resolution.rows.num_rows or resolution.replaced.num_rows
    return resolution.truncated or bool(written)


def _write_target(
    target: Any, spec: ApplySpec, version: int, resolution: Resolution, outcome: str
) -> None:
    """The batch's target snapshot: type 1 replaces its changed keys' rows by those alive
    after it, type 2 the versions it changed; a truncate keeps only ``kept``'s keys."""
    rows = inserted(spec, resolution)
    check_not_null(tables.table_schema(target), spec, rows)
    kept = resolution.kept if resolution.truncated else None
    tables.replace_rows(target, spec, version, resolution.replaced, rows, kept, outcome)


def _compact(state: Any, spec: ApplySpec, schema: pa.Schema) -> None:
    """The state, grown by a file per batch past ``compact_after_files``, rewritten in one
    snapshot without a marker: type 1's reduced to the changes that still decide a key
    (``compacted_state``), type 2's whole (a late change replays its key's history), so
    that reading it does not slow with a stream's age."""
    stored = _state_rows(state, spec, None)
    if spec.scd_type == 1:
        stored = compacted_state(spec, schema, stored)
    tables.overwrite_rows(state, spec, None, stored)
