"""Which vectorized engine resolves a commit fastest inside the source: pyarrow compute +
numpy (what ``server_plugin.row_level`` uses), DuckDB and Polars, on one copy-on-write
commit of 1M deletes + 1M inserts (an UPDATE of 10% of a 1M-row table: 900k carry-over
pairs, 100k updates), 5 and 50 columns, in this process (no Spark).

Each engine does the same work: count deletes and inserts per row id, pair each id's
delete with its insert, compare the pair's other columns NULL-safe, drop equal pairs and
relabel the others as updates, and hand back an Arrow table. The pyarrow side is the real
``resolve``, with every exactness rule of the client (floats by bits, nested types); the
DuckDB and Polars sides are plain queries without those rules, so they are if anything
favoured. An engine that is not installed is reported as such (DuckDB and Polars are not
dependencies of this project; ``pip install duckdb polars`` to compare).
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.row_level.rules import RowLevelRules, resolve

from tests.bench.common import Bench, Figure, interleaved, medians

BENCHMARK = "engines"
ROWS = 1_000_000
QUICK_ROWS = 20_000
COLUMNS = [5, 50]
RULES = RowLevelRules((("id",),), carryover_removal=True, update_detection=True)


def commit(rows: int, columns: int, seed: int = 7) -> pa.Table:
    """The commit's changelog rows: the old table's rows as deletes, the new as inserts,
    each in file order (shuffled), every tenth id's ``c1`` changed."""
    rng = np.random.default_rng(seed)
    ids = np.arange(rows, dtype=np.int64)

    def version(changed: bool) -> dict[str, pa.Array]:
        data: dict[str, pa.Array] = {"id": pa.array(ids)}
        for i in range(1, columns):
            kind = i % 3
            if kind == 1:
                data[f"c{i}"] = pa.array(ids + i + (changed and i == 1) * (ids % 10 == 0))
            elif kind == 2:
                data[f"c{i}"] = pa.array(ids * (0.5 + i))
            else:
                text = pc.cast(pa.array(ids), pa.string())
                data[f"c{i}"] = pc.binary_join_element_wise("v", text, "-")
        return data

    def side(changed: bool, kind: str) -> pa.Table:
        table = pa.table(version(changed)).take(pa.array(rng.permutation(rows)))
        return table.append_column("_change_type", pa.array(np.full(rows, kind)))

    both = pa.concat_tables([side(False, "delete"), side(True, "insert")]).combine_chunks()
    both = both.append_column("_commit_version", pa.array(np.full(2 * rows, 5, np.int64)))
    stamp = pa.array(np.zeros(2 * rows, np.int64)).cast(pa.timestamp("us", tz="UTC"))
    return both.append_column("_commit_timestamp", stamp)


def with_pyarrow(table: pa.Table) -> pa.Table:
    return resolve(table, RULES)


def with_duckdb(table: pa.Table) -> pa.Table:
    import duckdb

    data = [c for c in table.column_names if not c.startswith("_")]
    same = " AND ".join(f"d.{c} IS NOT DISTINCT FROM i.{c}" for c in data)
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.register("t", table)
    query = f"""
    WITH r AS (SELECT *, row_number() OVER () AS __rn FROM t),
    g AS (SELECT id, count(*) FILTER (WHERE _change_type = 'delete') dc,
                 count(*) FILTER (WHERE _change_type = 'insert') ic FROM r GROUP BY id),
    p AS (SELECT d.__rn drn, i.__rn irn, ({same}) AS same
          FROM r d JOIN r i USING (id) JOIN g USING (id)
          WHERE d._change_type = 'delete' AND i._change_type = 'insert' AND dc = 1 AND ic = 1),
    m AS (SELECT drn rn, same FROM p UNION ALL SELECT irn, same FROM p)
    SELECT r.* EXCLUDE (__rn, _change_type),
      CASE WHEN m.rn IS NULL THEN r._change_type
           WHEN r._change_type = 'delete' THEN 'update_preimage'
           ELSE 'update_postimage' END AS _change_type
    FROM r LEFT JOIN m ON r.__rn = m.rn WHERE m.same IS NULL OR NOT m.same
    """
    return con.sql(query).to_arrow_table()


def with_polars(table: pa.Table) -> pa.Table:
    import polars as pl

    frame = pl.from_arrow(table).with_row_index("__rn")
    kind = pl.col("_change_type")
    counts = frame.group_by("id").agg(dc=(kind == "delete").sum(), ic=(kind == "insert").sum())
    pairs = counts.filter((pl.col("dc") == 1) & (pl.col("ic") == 1)).select("id")
    deletes = frame.filter(kind == "delete").join(pairs, on="id")
    joined = deletes.join(frame.filter(kind == "insert"), on="id", suffix="_i")
    same = pl.lit(True)
    for column in table.column_names:
        if not column.startswith("_") and column != "id":
            same = same & pl.col(column).eq_missing(pl.col(column + "_i"))
    marks = joined.select(
        pl.col("__rn").alias("d"), pl.col("__rn_i").alias("i"), same.alias("same")
    )
    marked = pl.concat(
        [
            marks.select(pl.col("d").alias("__rn"), "same"),
            marks.select(pl.col("i").alias("__rn"), "same"),
        ]
    )
    out = frame.join(marked, on="__rn", how="left").filter(
        pl.col("same").is_null() | ~pl.col("same")
    )
    label = (
        pl.when(pl.col("same").is_null())
        .then(kind)
        .when(kind == "delete")
        .then(pl.lit("update_preimage"))
        .otherwise(pl.lit("update_postimage"))
    )
    return out.with_columns(label.alias("_change_type")).drop("__rn", "same").to_arrow()


ENGINES: dict[str, tuple[str | None, Callable[[pa.Table], pa.Table]]] = {
    "pyarrow + numpy": (None, with_pyarrow),
    "duckdb": ("duckdb", with_duckdb),
    "polars": ("polars", with_polars),
}


def _timed(engine: Callable[[pa.Table], pa.Table], table: pa.Table, expected: int) -> float:
    started = time.perf_counter()
    out = engine(table)
    elapsed = time.perf_counter() - started
    assert out.num_rows == expected, f"{engine.__name__}: {out.num_rows} rows"
    return elapsed


def import_seconds(module: str) -> float:
    """A fresh interpreter's time to import ``module`` (what a new Python worker pays)."""
    import subprocess
    import sys

    program = (
        f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    return float(done.stdout.strip() or "nan")


def run(bench: Bench) -> list[Figure]:
    rows = QUICK_ROWS if bench.quick else ROWS
    available = {
        name: engine
        for name, (module, engine) in ENGINES.items()
        if module is None or importlib.util.find_spec(module) is not None
    }
    missing = sorted(set(ENGINES) - set(available))
    figures = []
    for columns in [COLUMNS[0]] if bench.quick else COLUMNS:
        table = commit(rows, columns)
        expected = rows // 5  # 10% of the ids updated: a pre- and a post-image each
        for engine in available.values():  # a discarded warm-up: imports, allocator
            _timed(engine, table, expected)
        samples = interleaved(
            {
                name: (lambda e=engine, t=table, n=expected: _timed(e, t, n))
                for name, engine in available.items()
            },
            bench.reps,
        )
        median = medians(samples)
        base = median["pyarrow + numpy"]
        for name in available:
            figures.append(
                Figure(
                    benchmark=BENCHMARK,
                    case=f"{name}: {rows:,} deletes + {rows:,} inserts, {columns} columns",
                    ratio_label="seconds to resolve (median)",
                    ratio=round(median[name], 3),
                    medians={
                        "seconds": round(median[name], 3),
                        "vs pyarrow": round(median[name] / base, 2),
                    },
                    samples={"seconds": [round(s, 3) for s in samples[name]]},
                    notes=(f"not installed: {', '.join(missing)}" if missing else ""),
                )
            )
    for name, (module, _) in ENGINES.items():
        if name in available and module is not None:
            figures.append(
                Figure(
                    benchmark=BENCHMARK,
                    case=f"import {module} in a fresh Python worker",
                    ratio_label="seconds",
                    ratio=round(import_seconds(module), 3),
                )
            )
    return figures
