"""A batch applied where the sink runs (a task's share in the executors, the commit in the
driver's Python process), with the errors a user can meet named: ours as they are, the
environment's (I/O, memory) too, a delta-rs failure as the target's, anything else as a
bug of ours."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa
from spark_cdc.server_plugin.errors import ChangelogSourceError, error
from spark_cdc.server_plugin.sinks.apply.delta.state import StateMemory
from spark_cdc.server_plugin.sinks.apply.engine.batch import (
    Outcome,
    Share,
    apply_batch,
    apply_shares,
    resolve_share,
)
from spark_cdc.server_plugin.sinks.apply.engine.spec import ICEBERG, ApplySpec


def applied(
    spec: ApplySpec,
    version: int,
    *,
    table: pa.Table | None = None,
    memory: StateMemory | None = None,
    shares: list[Share] | None = None,
) -> Outcome:
    """The writer's batch ``version`` applied: its rows (``table``, ``apply_batch``) or the
    tasks' resolved ``shares`` (``apply_shares``); an Iceberg target's by ``iceberg_batch``
    and ``iceberg_shares``."""
    with named_errors(spec):
        if spec.target_format == ICEBERG:
            from spark_cdc.server_plugin.sinks.apply.iceberg import batch as iceberg_batch
            from spark_cdc.server_plugin.sinks.apply.iceberg import shares as iceberg_shares

            if shares is not None:
                return iceberg_shares.apply_shares(spec, shares, version)
            assert table is not None
            return iceberg_batch.apply_batch(spec, table, version)
        if shares is not None:
            return apply_shares(spec, shares, version)
        assert table is not None
        return apply_batch(spec, table, version, memory)


def resolved(spec: ApplySpec, rows: pa.Table) -> Share | None:
    """A task's share of the batch resolved (``resolve_share``; None: the commit resolves
    the batch whole)."""
    with named_errors(spec):
        if spec.target_format == ICEBERG:
            from spark_cdc.server_plugin.sinks.apply.iceberg import shares as iceberg_shares

            return iceberg_shares.resolve_share(spec, rows)
        return resolve_share(spec, rows)


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
