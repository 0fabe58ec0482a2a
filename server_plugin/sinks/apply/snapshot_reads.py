"""What ``apply_changes_from_snapshot`` reads through the sink before it writes: where
the writer's snapshots stand (``status``), and the target's rows that the next snapshot is
compared with (``target_rows``), in the target's own format.

Those rows are the target's current ones, except after a stop between a snapshot's two
commits (the target's, then the state's: ``engine.batch``). The snapshot is then applied
again, and must give the same changes as the first time, or the state would record other
changes than the target's. So the rows read are the target as the state last described
it (the version its newest outcome names, ``binding.Bound``): what the first run compared.
The client then also reads the target's current rows (``current``), to check that the
snapshot given again is the one the target received.

Where the target's files hold those rows as they are (``plain_read``), the client reads them
with Spark's own Parquet reader instead of the sink's, given their paths and schema.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.sinks.apply.engine.batch import BOUND_SEARCH, check_binding
from spark_cdc.server_plugin.sinks.apply.engine.binding import REFRESH, Bound
from spark_cdc.server_plugin.sinks.apply.engine.formats import TableFormat
from spark_cdc.server_plugin.sinks.apply.engine.spec import ICEBERG, ApplySpec
from spark_cdc.server_plugin.sinks.apply.task import table_format


@dataclass(frozen=True)
class Status:
    """Whether the target exists, the writer's last batch (its last snapshot's version)
    in the target and in the state (None: none), and the writer: the spec's, or the
    generation the last full refresh started (``writer``)."""

    target_exists: bool
    target_batch: int | None
    state_batch: int | None
    writer: str
    unique_at: int | None = None  # the target's current version, when ``_unique_at`` vouches


def status(spec: ApplySpec) -> Status:
    """Where the writer stands. What the next snapshot's batch would be refused for is
    refused here, before a snapshot is read or compared (``batch.check_binding``): a
    target a change feed wrote, one gone or replaced, a state gone, whose message comes
    first (not an interrupted snapshot's, which only the target's last batch, applied
    again, may be), and a full refresh stopped between its two commits. A full refresh's
    first snapshot (``spec.full_refresh``) rebuilds both tables: nothing of them counts."""
    tables_format = table_format(spec)
    target, state = tables_format.existing_target(spec), tables_format.existing_state(spec)
    if spec.full_refresh:
        return Status(target is not None, None, None, spec.app_id)
    spec = dataclasses.replace(spec, app_id=_writer(tables_format, spec, state))
    if target is not None and state is not None:  # a state gone: check_binding's to say
        _check_refresh_finished(tables_format, spec, target)
    last = [
        None if t is None else tables_format.last_batch(t, spec.app_id) for t in (target, state)
    ]
    check_binding(tables_format, spec, target, state, -1 if last[0] is None else last[0])
    unique_at = _unique_at(tables_format, spec, target, state)
    return Status(target is not None, last[0], last[1], spec.app_id, unique_at)


def _unique_at(tables_format: TableFormat, spec: ApplySpec, target: Any, state: Any) -> int | None:
    """The target's version, when its rows (type 2: its open versions) hold each key once
    for certain: it is the version the state's newest commit binds (``binding.Bound``).
    That batch wrote it, or compared its snapshot with it and left it as it was, and then
    the comparison counted its rows (a key twice is refused) unless they were this very
    version's, vouched for by the batch before: so the next comparison need not count them
    again (``snapshot_changes``' costliest step). Another writer's commit since (a hand
    edit, a compaction) gives None: the rows are counted."""
    if target is None or state is None:
        return None
    bound = Bound.newest(tables_format.outcomes(state, spec, BOUND_SEARCH))
    return bound.version if bound == tables_format.identity(target) else None


def _writer(tables_format: TableFormat, spec: ApplySpec, state: Any) -> str:
    """The writer of the target's snapshots: the generation of the last full refresh
    (its id is the writer's, ``binding.REFRESH`` and its own suffix), as the state's
    newest commit names it, else the spec's own."""
    generation = spec.app_id + REFRESH
    # The newest commit with an outcome: a compaction or a vacuum of the state records none.
    newest = (
        None
        if state is None
        else next(iter(tables_format.outcomes(state, spec, BOUND_SEARCH)), None)
    )
    writer = None if newest is None else str(json.loads(newest).get("app_id", ""))
    return writer if writer and writer.startswith(generation) else spec.app_id


def _check_refresh_finished(tables_format: TableFormat, spec: ApplySpec, target: Any) -> None:
    """A full refresh committed to the target and stopped before its state's commit
    leaves the target rebuilt and the state as it was: refused until the refresh runs
    again (a snapshot compared with the one and resolved against the other would be
    applied wrong)."""
    base = spec.app_id.split(REFRESH)[0]
    for outcome in tables_format.outcomes(target, spec, BOUND_SEARCH):
        writer = str(json.loads(outcome).get("app_id", ""))
        if writer.startswith(base + REFRESH) and writer != spec.app_id:
            raise error("APPLY_CHANGES.SNAPSHOT_REFRESH_INTERRUPTED", path=spec.target)
        if writer.startswith(base):
            return


def plain_read(spec: ApplySpec, found: Status | None) -> tuple[str, list[str], bool] | None:
    """The schema (as JSON) and the files of the target's rows to compare with, when
    Spark's Parquet reader reads them exactly (``delta.rows.plain_files``), and whether
    they hold each key once for certain (``_unique_at``: the files are then that
    version's); None when the sink must read them, or there are none. ``found`` None: the
    spec's target is a Delta table read as a snapshot source, at its current version."""
    if spec.target_format == ICEBERG or (found is not None and spec.full_refresh):
        return None  # a refresh's first snapshot compares with nothing
    exists, version = (True, None) if found is None else _version_read(spec, found)
    unique_at = found.unique_at if found is not None and version is None else None
    if unique_at is not None:  # the files of the version vouched for
        version = unique_at
    plain = _rows_module(spec).plain_files(spec, version) if exists else None
    return None if plain is None else (plain[0].json(), plain[1], unique_at is not None)


def _version_read(spec: ApplySpec, found: Status | None = None) -> tuple[bool, int | None]:
    """Whether the target has rows to compare with, and at which version of it (None:
    its current one; module docstring). ``found``: the writer's status, read already."""
    tables_format = table_format(spec)
    found = status(spec) if found is None else found
    if not found.target_exists:
        return False, None
    done = -1 if found.state_batch is None else found.state_batch
    if found.target_batch is None or found.target_batch <= done:
        return True, None
    state = tables_format.existing_state(spec)
    if state is None:  # the target was made by the stopped snapshot: it compared nothing
        return False, None
    bound = Bound.newest(tables_format.outcomes(state, spec, BOUND_SEARCH))
    return True, None if bound is None else bound.version


def _rows_module(spec: ApplySpec) -> Any:
    if spec.target_format == ICEBERG:
        from spark_cdc.server_plugin.sinks.apply.iceberg import rows
    else:
        from spark_cdc.server_plugin.sinks.apply.delta import rows  # type: ignore[no-redef]
    return rows


class NoRows(InputPartition):
    """The partition of a target with nothing to compare with."""


def target_schema(spec: ApplySpec, current: bool = False) -> StructType:
    """The target's columns, at the version its rows are read at (``current``: its
    current one)."""
    return _rows_module(spec).schema(spec, None if current else _version_read(spec)[1])


def target_partitions(spec: ApplySpec, count: int, current: bool = False) -> list[InputPartition]:
    exists, version = (True, None) if current else _version_read(spec)
    if not exists:
        return [NoRows(None)]
    return list(_rows_module(spec).partitions(spec, version, count))


def target_rows(
    spec: ApplySpec, partition: InputPartition, declared: StructType
) -> Iterator[pa.RecordBatch]:
    if isinstance(partition, NoRows):
        return iter(())
    return _rows_module(spec).read(spec, partition, declared)
