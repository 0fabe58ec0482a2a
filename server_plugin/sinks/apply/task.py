"""A batch applied where the sink runs (a task's share in the executors, the commit in the
driver's Python process), with the errors a user can meet named: ours as they are, the
environment's (I/O, memory) too, a delta-rs failure as the target's, anything else as a
bug of ours."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from spark_cdc.server_plugin.errors import ChangelogSourceError, error
from spark_cdc.server_plugin.sinks.apply.engine import batch as engine
from spark_cdc.server_plugin.sinks.apply.engine.batch import Share, ShareTables
from spark_cdc.server_plugin.sinks.apply.engine.changes import Outcome
from spark_cdc.server_plugin.sinks.apply.engine.formats import TableFormat
from spark_cdc.server_plugin.sinks.apply.engine.spec import ICEBERG, ApplySpec


def table_format(spec: ApplySpec) -> TableFormat:
    """The format of the spec's target (and its state): the engine's tables for it,
    imported only when a writer asks (each needs its own library: delta-rs, pyiceberg)."""
    if spec.target_format == ICEBERG:
        from spark_cdc.server_plugin.sinks.apply.iceberg.format import FORMAT
    else:
        from spark_cdc.server_plugin.sinks.apply.delta.format import FORMAT  # type: ignore[assignment]
    return FORMAT


def apply_batch(spec: ApplySpec, table: pa.Table, version: int, memory: Any = None) -> Outcome:
    """``engine.batch.apply_batch`` into the spec's format."""
    return engine.apply_batch(table_format(spec), spec, table, version, memory)


def apply_shares(spec: ApplySpec, shares: list[Share], version: int) -> Outcome:
    """``engine.batch.apply_shares`` into the spec's format."""
    return engine.apply_shares(table_format(spec), spec, shares, version)


def resolve_share(
    spec: ApplySpec, rows: pa.Table, opened: list[ShareTables | None] | None = None
) -> Share | None:
    """``engine.batch.resolve_share`` against the spec's format."""
    return engine.resolve_share(table_format(spec), spec, rows, opened)


def applied(
    spec: ApplySpec,
    version: int,
    *,
    table: pa.Table | None = None,
    memory: Any = None,
    shares: list[Share] | None = None,
) -> Outcome:
    """The writer's batch ``version`` applied, its errors named: its rows (``table``,
    ``apply_batch``) or the tasks' resolved ``shares`` (``apply_shares``)."""
    with named_errors(spec):
        if shares is not None:
            return apply_shares(spec, shares, version)
        assert table is not None
        return apply_batch(spec, table, version, memory)


def resolved(
    spec: ApplySpec, rows: pa.Table, opened: list[ShareTables | None] | None = None
) -> Share | None:
    """A task's share of the batch resolved, its errors named (``resolve_share``; None:
    the commit resolves the batch whole)."""
    with named_errors(spec):
        return resolve_share(spec, rows, opened)


@contextmanager
def named_errors(spec: ApplySpec) -> Iterator[None]:
    from deltalake.exceptions import DeltaError  # its classes live in deltalake's _internal

    try:
        yield
    except (ChangelogSourceError, OSError, MemoryError, ImportError):
        raise
    except Exception as problem:
        if isinstance(problem, DeltaError):
            raise error(
                "APPLY_CHANGES.TARGET_WRITE_FAILED",
                path=spec.target,
                problem=str(problem).strip().splitlines()[0],
            ) from problem
        raise error(
            "APPLY_CHANGES.INTERNAL_ERROR",
            path=spec.target,
            problem=f"{type(problem).__name__}: {problem}",
        ) from problem
