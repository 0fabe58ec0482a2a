"""``apply_changes`` into an Iceberg target beside pyiceberg's own ``upsert`` of the same
micro-batches (type 1), on the same changes as the Delta cases (``apply``: 90% updates of
random existing keys, 5% deletes, 5% new keys, a Parquet file a micro-batch).

- ours: ``apply_changes(format="iceberg")`` into a table of a SQL catalog (SQLite), built by
  ``apply_changes`` from the base rows (not timed);
- pyiceberg's upsert: the ``foreachBatch`` function an Iceberg user writes without this
  package: each key's last change kept, the deletes deleted (``Table.delete`` of their ids)
  and the rest upserted (``Table.upsert`` on the identifier field), into a table pyiceberg
  built from the same base rows. It remembers no deletes and compares no sequence: a stale
  change wins (less correct than ours).

Each run builds its own tables in a folder no earlier run used. The figure is ours ÷ upsert in
changes per second over the micro-batches after the first, medians of interleaved
repetitions. Both rewrite the data files that hold a micro-batch's keys (pyiceberg writes no
delete files): with keys spread over the table, nearly all of it. The target is smaller than
the Delta cases' (``TARGET_ROWS``), so a run stays within minutes.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import cloudpickle
from spark_cdc import apply_changes

from tests.bench import apply
from tests.bench.common import Bench, Figure, interleaved, medians, paired_spread

BENCHMARK = "apply_iceberg"
TARGET_ROWS, QUICK_TARGET_ROWS = 1_000_000, 100_000
BATCHES, QUICK_BATCHES = (10_000, 100_000), (1_000,)
VALUES = ["status", "amount", "region", "note"]
TABLE = "db.target"

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the foreachBatch function


def _catalog(run: Path) -> dict[str, str]:
    return {
        "name": "bench",
        "type": "sql",
        "uri": f"sqlite:///{run}/catalog.db",
        "warehouse": f"file://{run}/warehouse",
    }


def _base_rows(bench: Bench, target_rows: int) -> Path:
    """The target's rows (made once), as the changes files' columns."""
    path = bench.work / f"apply_iceberg_base_{target_rows}.parquet"
    if not path.exists():
        rng = np.random.default_rng(0)
        table = pa.table(apply.change_columns(np.arange(target_rows), 0, rng))
        pq.write_table(table.append_column("op", pa.repeat(pa.scalar("U"), target_rows)), path)
    return path


def _upsert_table(run: Path, base: Path) -> None:
    """pyiceberg's table of the base rows, ``id`` its identifier field."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType

    properties = _catalog(run)
    catalog = SqlCatalog("bench", uri=properties["uri"], warehouse=properties["warehouse"])
    catalog.create_namespace("db")
    fields = [NestedField(1, "id", LongType(), required=True)]
    types = {"status": StringType(), "amount": DoubleType(), "region": StringType()}
    for i, name in enumerate(VALUES, start=2):
        fields.append(NestedField(i, name, types.get(name, StringType()), required=False))
    table = catalog.create_table(TABLE, Schema(*fields, identifier_field_ids=[1]))
    rows = pq.read_table(base).select(["id", *VALUES])
    table.append(rows.cast(table.schema().as_arrow()))


def pyiceberg_upsert(catalog: dict[str, str]) -> Any:
    """The ``foreachBatch`` function of an Iceberg user (see the module docstring)."""

    def upsert_batch(batch: Any, batch_id: int) -> None:
        import pyarrow.compute as pc
        from pyiceberg.catalog.sql import SqlCatalog
        from pyiceberg.expressions import In

        changes = apply.last_changes(batch.toArrow())
        table = SqlCatalog("bench", uri=catalog["uri"], warehouse=catalog["warehouse"]).load_table(
            TABLE
        )
        deleted = pc.equal(changes.column("op"), "D")
        gone = changes.filter(deleted).column("id").to_pylist()
        if gone:
            table.delete(In("id", gone))
        kept = changes.filter(pc.invert(deleted)).select(["id", *VALUES])
        if kept.num_rows:
            table.upsert(kept.cast(table.schema().as_arrow()), join_cols=["id"])

    return upsert_batch


def run(bench: Bench) -> list[Figure]:
    target_rows = QUICK_TARGET_ROWS if bench.quick else TARGET_ROWS
    return [
        _case(bench, count, target_rows) for count in (QUICK_BATCHES if bench.quick else BATCHES)
    ]


def _case(bench: Bench, count: int, target_rows: int) -> Figure:
    source = apply.random_changes(bench, target_rows, count)
    base = _base_rows(bench, target_rows)
    runs = bench.work / "apply_iceberg_runs"
    firsts: dict[str, list[float]] = {"ours": [], "pyiceberg upsert": []}

    def ours() -> float:
        run = apply.unused_folder(runs / "ours")
        catalog = _catalog(run)
        built = bench.spark.read.schema(apply.SCHEMA).parquet(str(base))
        apply_changes(built, TABLE, format="iceberg", catalog=catalog, **apply.APPLIED)

        def start() -> Any:
            return apply_changes(
                apply.file_stream(bench, source),
                TABLE,
                checkpoint_location=str(run / "checkpoint"),
                trigger={"availableNow": True},
                format="iceberg",
                catalog=catalog,
                **apply.APPLIED,
            )

        return apply.micro_batch_rates(count, start, firsts["ours"])

    def upsert() -> float:
        run = apply.unused_folder(runs / "upsert")
        _upsert_table(run, base)
        writer = apply.file_stream(bench, source).writeStream.foreachBatch(
            pyiceberg_upsert(_catalog(run))
        )
        writer = writer.option("checkpointLocation", str(run / "checkpoint"))
        return apply.micro_batch_rates(
            count, lambda: writer.trigger(availableNow=True).start(), firsts["pyiceberg upsert"]
        )

    samples = interleaved({"ours": ours, "pyiceberg upsert": upsert}, bench.reps)
    shutil.rmtree(runs, ignore_errors=True)
    rates = medians(samples)
    ratio = rates["ours"] / rates["pyiceberg upsert"]
    return Figure(
        BENCHMARK,
        f"Iceberg, type 1, {count:,} changes a micro-batch into {target_rows:,} rows",
        "ours/pyiceberg upsert (changes/s, micro-batches after the first)",
        round(ratio, 3),
        medians={k: round(v) for k, v in rates.items()},
        samples={k: [round(x) for x in v] for k, v in samples.items()},
        spread=paired_spread(samples["ours"], samples["pyiceberg upsert"]),
        notes=(
            f"changes/s after the first micro-batch: ours {rates['ours']:,.0f}, pyiceberg's "
            f"upsert {rates['pyiceberg upsert']:,.0f}"
        ),
    )
