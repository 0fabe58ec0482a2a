"""One batch applied where the sink's commit runs (the driver's Python process), with the
errors a user can meet named: ours as they are, the environment's (I/O, memory) too, a
delta-rs failure as the target's, anything else as a bug of ours."""

from __future__ import annotations

import pyarrow as pa
from spark_cdc.server_plugin.errors import ChangelogSourceError, error
from spark_cdc.server_plugin.sinks.apply.batch import Outcome, apply_batch
from spark_cdc.server_plugin.sinks.apply.spec import ApplySpec
from spark_cdc.server_plugin.sinks.apply.state import StateMemory


def applied(
    spec: ApplySpec, table: pa.Table, version: int, memory: StateMemory | None = None
) -> Outcome:
    """``table`` applied as the writer's batch ``version`` (``apply_batch``)."""
    from deltalake.exceptions import DeltaError  # its classes live in deltalake's _internal

    try:
        return apply_batch(spec, table, version, memory)
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
