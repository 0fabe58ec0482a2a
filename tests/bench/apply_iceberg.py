"""``apply_changes`` into an Iceberg target beside what an Iceberg user writes without this
package, on the same changes as the Delta cases (``apply``: 90% updates of random existing
keys, 5% deletes, 5% new keys, a Parquet file a micro-batch), into 10M rows (100k with
``--quick``), 10k / 100k / 1M changes a micro-batch:

- ours: ``apply_changes(format="iceberg")`` into a table of a SQL catalog (SQLite), built by
  ``apply_changes`` from the base rows (not timed); type 1 and type 2;
- type 1, pyiceberg's upsert: the ``foreachBatch`` function that keeps each key's last
  change, deletes the deletes (``Table.delete`` of their ids) and upserts the rest
  (``Table.upsert`` on the identifier field). It remembers no deletes and compares no
  sequence: a stale change wins (less correct than ours);
- type 2, pyiceberg's overwrite-by-filter: the ``foreachBatch`` function that reads the
  current versions of the batch's keys, closes them at the change's sequence, opens a
  version for each upsert, and writes both with ``Table.overwrite`` filtered to those
  current versions. Changes arriving out of order are appended, not placed (less correct
  than ours).

Each side's base tables are built once (not timed); each run registers them in a catalog of
its own, in a folder no earlier run used, and its commits add files beside the base's. The
figure is ours ÷ theirs in changes per second over the micro-batches after the first,
medians of interleaved repetitions. By default both rewrite the data files that hold a
micro-batch's keys (pyiceberg writes no delete files): with keys spread over the table,
nearly all of it. A third side applies to a target that asks for merge-on-read
(``write.merge.mode``), each replaced row marked deleted by a position delete file: its
figure is reported beside the default's, against the same pyiceberg runs.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import cloudpickle
from spark_cdc import apply_changes
from spark_cdc.server_plugin.sinks.apply.engine.spec import END_AT, START_AT

from tests.bench import apply
from tests.bench.common import Bench, Figure, interleaved, medians, paired_spread
from tests.bench.worker_memory import Sampler

BENCHMARK = "apply_iceberg"
TARGET_ROWS, QUICK_TARGET_ROWS = 10_000_000, 100_000
BATCHES, QUICK_BATCHES = (10_000, 100_000, 1_000_000), (1_000,)
VALUES = ["status", "amount", "region", "note"]
TABLE = "db.target"
MOR = "ours, merge-on-read"  # the side applying to a target that asks for merge-on-read
_BUILD_ROWS = 10_000_000

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the foreachBatch function


def _catalog(run: Path) -> dict[str, str]:
    return {
        "name": "bench",
        "type": "sql",
        "uri": f"sqlite:///{run}/catalog.db",
        "warehouse": f"file://{run}/warehouse",
    }


def base_rows(bench: Bench, target_rows: int) -> Path:
    """The target's rows (made once), as the changes files' columns."""
    path = bench.work / f"apply_iceberg_base_{target_rows}.parquet"
    if not path.exists():
        rng = np.random.default_rng(0)
        table = pa.table(apply.change_columns(np.arange(target_rows), 0, rng))
        pq.write_table(table.append_column("op", pa.repeat(pa.scalar("U"), target_rows)), path)
    return path


def ours_base(bench: Bench, base: Path, target_rows: int, scd_type: int) -> dict[str, str]:
    """The target and state ``apply_changes`` builds from the base rows (built once), 10M
    rows a batch (within the server's memory)."""

    def build(folder: Path) -> list[str]:
        rows = bench.spark.read.schema(apply.SCHEMA).parquet(str(base))
        applying = {**apply.APPLIED, "stored_as_scd_type": scd_type}
        for first in range(0, target_rows, _BUILD_ROWS):
            part = rows.where(f"id >= {first} AND id < {first + _BUILD_ROWS}")
            apply_changes(part, TABLE, format="iceberg", catalog=_catalog(folder), **applying)
        return [TABLE, TABLE + "__apply_changes_state"]

    return _built(bench.work / f"apply_iceberg_ours_{target_rows}_{scd_type}", build)


def _hand_base(bench: Bench, base: Path, target_rows: int, scd_type: int) -> dict[str, str]:
    """pyiceberg's table of the base rows (built once)."""

    def build(folder: Path) -> list[str]:
        _hand_table(folder, base, scd_type)
        return [TABLE]

    return _built(bench.work / f"apply_iceberg_hand_{target_rows}_{scd_type}", build)


def _built(folder: Path, build: Callable[[Path], list[str]]) -> dict[str, str]:
    """The metadata locations of the tables ``build`` makes in a catalog in ``folder``
    (made once, kept for later runs)."""
    from pyiceberg.catalog.sql import SqlCatalog

    made = folder / "_tables.json"
    if not made.exists():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        names = build(folder)
        properties = _catalog(folder)
        catalog = SqlCatalog("bench", uri=properties["uri"], warehouse=properties["warehouse"])
        locations = {n: catalog.load_table(n).metadata_location for n in names}
        made.write_text(json.dumps(locations))
    return dict(json.loads(made.read_text()))


def registered(run: Path, tables: dict[str, str]) -> dict[str, str]:
    """A catalog of its own in ``run`` holding ``tables`` as their base's metadata left
    them: a run's commits add files beside the base's, which keeps its own snapshot."""
    from pyiceberg.catalog.sql import SqlCatalog

    properties = _catalog(run)
    catalog = SqlCatalog("bench", uri=properties["uri"], warehouse=properties["warehouse"])
    catalog.create_namespace("db")
    for name, location in tables.items():
        catalog.register_table(name, location)
    return properties


def _hand_table(run: Path, base: Path, scd_type: int) -> None:
    """pyiceberg's table of the base rows: type 1's keyed by ``id`` (its identifier
    field), type 2's versions opened at sequence 0."""
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
    rows = pq.read_table(base).select(["id", *VALUES])
    if scd_type == 1:
        table = catalog.create_table(TABLE, Schema(*fields, identifier_field_ids=[1]))
    else:
        fields += [
            NestedField(len(fields) + 1, START_AT, LongType(), required=False),
            NestedField(len(fields) + 2, END_AT, LongType(), required=False),
        ]
        table = catalog.create_table(TABLE, Schema(*fields))
        rows = rows.append_column(START_AT, pa.repeat(pa.scalar(0, pa.int64()), rows.num_rows))
        rows = rows.append_column(END_AT, pa.nulls(rows.num_rows, pa.int64()))
    for start in range(0, rows.num_rows, 1_000_000):  # within pyiceberg's memory
        table.append(rows.slice(start, 1_000_000).cast(table.schema().as_arrow()))


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


def pyiceberg_history(catalog: dict[str, str]) -> Any:
    """The type 2 ``foreachBatch`` function of an Iceberg user (see the module docstring)."""

    def history_batch(batch: Any, batch_id: int) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyiceberg.catalog.sql import SqlCatalog
        from pyiceberg.expressions import And, In, IsNull

        changes = apply.last_changes(batch.toArrow())
        table = SqlCatalog("bench", uri=catalog["uri"], warehouse=catalog["warehouse"]).load_table(
            TABLE
        )
        current = And(IsNull(END_AT), In("id", changes.column("id").to_pylist()))
        held = table.scan(row_filter=current).to_arrow()
        ends = changes.select(["id", "seq"]).rename_columns(["id", "__end"])
        closed = (
            held.join(ends, "id")
            .drop_columns([END_AT])
            .rename_columns([*held.schema.names[:-1], END_AT])
        )
        upserts = changes.filter(pc.not_equal(changes.column("op"), "D"))
        opened = upserts.select(["id", *VALUES]).append_column(START_AT, upserts.column("seq"))
        opened = opened.append_column(END_AT, pa.nulls(opened.num_rows, pa.int64()))
        schema = table.schema().as_arrow()
        written = pa.concat_tables([closed.cast(schema), opened.cast(schema)])
        table.overwrite(written, overwrite_filter=current)

    return history_batch


def run(bench: Bench) -> list[Figure]:
    target_rows = QUICK_TARGET_ROWS if bench.quick else TARGET_ROWS
    counts = QUICK_BATCHES if bench.quick else BATCHES
    return [f for t in (1, 2) for count in counts for f in _case(bench, t, count, target_rows)]


def _case(bench: Bench, scd_type: int, count: int, target_rows: int) -> list[Figure]:
    """The default target (copy-on-write) and one asking for merge-on-read, each beside
    pyiceberg's own job, their runs interleaved."""
    source = apply.random_changes(bench, target_rows, count)
    base = base_rows(bench, target_rows)
    runs = bench.work / "apply_iceberg_runs"
    theirs = "pyiceberg upsert" if scd_type == 1 else "pyiceberg overwrite-by-filter"
    firsts: dict[str, list[float]] = {"ours": [], MOR: [], theirs: []}
    peaks: dict[str, list[float]] = {"ours": [], MOR: []}
    applying = {**apply.APPLIED, "stored_as_scd_type": scd_type}

    def ours(side: str) -> Callable[[], float]:
        def timed() -> float:
            run = apply.unused_folder(runs / side.replace(", ", "-"))
            catalog = registered(run, ours_base(bench, base, target_rows, scd_type))
            if side == MOR:
                merging_on_read(catalog)

            start = ours_stream(bench, source, run, catalog, applying)
            if bench.server_pid is None:
                return apply.micro_batch_rates(count, start, firsts[side])
            with Sampler(bench.server_pid) as sampler:
                rate = apply.micro_batch_rates(count, start, firsts[side])
            peaks[side].append(sampler.peak_kb / 1024)
            return rate

        return timed

    def hand() -> float:
        run = apply.unused_folder(runs / "hand")
        catalog = registered(run, _hand_base(bench, base, target_rows, scd_type))
        function = pyiceberg_upsert if scd_type == 1 else pyiceberg_history
        writer = apply.file_stream(bench, source).writeStream.foreachBatch(function(catalog))
        writer = writer.option("checkpointLocation", str(run / "checkpoint"))
        return apply.micro_batch_rates(
            count, lambda: writer.trigger(availableNow=True).start(), firsts[theirs]
        )

    sides = {"ours": ours("ours"), MOR: ours(MOR), theirs: hand}
    samples = interleaved(sides, bench.reps)
    shutil.rmtree(runs, ignore_errors=True)
    rates = medians(samples)
    case = f"Iceberg, type {scd_type}, {count:,} changes a micro-batch into {target_rows:,} rows"
    figures = []
    for side, named in (("ours", case), (MOR, f"{case}, merge-on-read")):
        ratio = rates[side] / rates[theirs]
        peak = max(peaks[side], default=0)
        figures.append(
            Figure(
                BENCHMARK,
                named,
                f"ours/{theirs} (changes/s, micro-batches after the first)",
                round(ratio, 3),
                medians={"ours": round(rates[side]), theirs: round(rates[theirs])}
                | {"peak MB (ours)": peak},
                samples={k: [round(x) for x in samples[k]] for k in (side, theirs)},
                spread=paired_spread(samples[side], samples[theirs]),
                notes=(
                    f"changes/s after the first micro-batch: {side} {rates[side]:,.0f}, "
                    f"{theirs} {rates[theirs]:,.0f}; peak memory of the server's largest "
                    f"Python process ({side}) {peak:,.0f} MB"
                ),
            )
        )
    return figures


def ours_stream(
    bench: Bench, source: str, run: Path, catalog: dict[str, str], applying: dict[str, Any]
) -> Callable[[], Any]:
    """What starts ours' ``availableNow`` stream of the change files in ``source`` into the
    run's target."""

    def start() -> Any:
        return apply_changes(
            apply.file_stream(bench, source),
            TABLE,
            checkpoint_location=str(run / "checkpoint"),
            trigger={"availableNow": True},
            format="iceberg",
            catalog=catalog,
            **applying,
        )

    return start


def merging_on_read(catalog: dict[str, str]) -> None:
    """The run's target asks for merge-on-read (``write.merge.mode``), as a user sets it."""
    from pyiceberg.catalog.sql import SqlCatalog

    found = SqlCatalog("bench", uri=catalog["uri"], warehouse=catalog["warehouse"])
    with found.load_table(TABLE).transaction() as change:
        change.set_properties({"write.merge.mode": "merge-on-read"})
