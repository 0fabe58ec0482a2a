"""Where applying runs inside the server, one Python process per batch.

A batch DataFrame is moved into one partition (``repartition(1)``: the feed's own work
stays parallel) and applied by ``applier``'s function in that task's Python worker, next to
the data: nothing travels through the client. A stream's ``foreachBatch`` function
(``each_micro_batch``) runs in a Python process of the server and applies each micro-batch
there, numbered with its id: the idempotency marker a restarted stream finds in the tables.

These functions travel to the server by value (``registration``), so a server needs the
package's imports (pyarrow, deltalake), not the package.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from spark_cdc.server_plugin.apply.batch import Outcome, apply_batch
from spark_cdc.server_plugin.apply.spec import ApplySpec
from spark_cdc.server_plugin.apply.state import StateMemory
from spark_cdc.server_plugin.errors import ChangelogSourceError, error

STATUS_SCHEMA = "changes long, keys long, rows long, skipped boolean"


def applier(
    spec: ApplySpec, version: int
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function applying its partition as the writer's ``version``."""

    def apply_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        collected = list(batches)
        if not collected:
            return
        outcome = _applied(spec, pa.Table.from_batches(collected), version)
        yield pa.RecordBatch.from_pylist(
            [outcome.__dict__],
            schema=pa.schema(
                [
                    ("changes", pa.int64()),
                    ("keys", pa.int64()),
                    ("rows", pa.int64()),
                    ("skipped", pa.bool_()),
                ]
            ),
        )

    return apply_partition


def _applied(
    spec: ApplySpec, table: pa.Table, version: int, memory: StateMemory | None = None
) -> Outcome:
    """Errors of ours as they are; the environment's (I/O, memory) too; anything else is a
    bug of ours, named as one."""
    try:
        return apply_batch(spec, table, version, memory)
    except (ChangelogSourceError, OSError, MemoryError, ImportError):
        raise
    except Exception as problem:
        if type(problem).__module__.startswith("deltalake"):
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


def apply_once(prepared: Any, spec: ApplySpec, version: int) -> list[Any]:
    """Run the one task applying ``prepared`` (a DataFrame) and return its status rows."""
    job = prepared.repartition(1).mapInArrow(applier(spec, version), STATUS_SCHEMA)
    return list(job.collect())


def each_micro_batch(spec: ApplySpec) -> Callable[[Any, int], None]:
    """The stream's ``foreachBatch`` function: it runs in a Python process of the server
    already, so it applies the micro-batch itself (Arrow from the driver), without the
    shuffle and the second job a task of its own would cost each micro-batch. The process
    lives as long as the query: the state's copy in ``memory`` serves the next batch."""
    memory = StateMemory()

    def apply_micro_batch(batch: Any, batch_id: int) -> None:
        table = batch.toArrow()
        if table.num_rows:
            _applied(spec, table, batch_id, memory)

    return apply_micro_batch
