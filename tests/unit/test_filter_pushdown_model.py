"""The early cut of pushed filters (``changefeed.pushdown``) against a model of Spark's own
evaluation: on every column kind, with NULLs, under NOT, a filter Arrow evaluates keeps
exactly the rows Spark keeps, and the others (floating point, a NULL in an IN list) are left
to Spark; commits and files are skipped exactly where no row of theirs could pass.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T
from spark_cdc.server_plugin.changefeed.pushdown import (
    kept_rows,
    kept_tasks,
    row_groups,
    translated,
)

from tests.support.spark_version import SPARK

if SPARK < (4, 1):
    pytest.skip("PySpark's filter classes come with Spark 4.1", allow_module_level=True)

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

UTC = dt.timezone.utc
SCHEMA = T.StructType(
    [
        T.StructField("i", T.LongType()),
        T.StructField("s", T.StringType()),
        T.StructField("d", T.DateType()),
        T.StructField("t", T.TimestampType()),
        T.StructField("n", T.TimestampNTZType()),
        T.StructField("m", T.DecimalType(5, 2)),
        T.StructField("b", T.BooleanType()),
        T.StructField("f", T.DoubleType()),
    ]
)
ARROW = pa.schema(
    [
        ("i", pa.int64()),
        ("s", pa.string()),
        ("d", pa.date32()),
        ("t", pa.timestamp("us", tz="UTC")),
        ("n", pa.timestamp("us")),
        ("m", pa.decimal128(5, 2)),
        ("b", pa.bool_()),
        ("f", pa.float64()),
    ]
)
DAY = dt.date(2024, 1, 1)
VALUES = {
    "i": st.integers(-3, 3),
    "s": st.sampled_from(["", "a", "ab", "b", "ba", "é", "aé"]),
    "d": st.integers(0, 3).map(lambda k: DAY + dt.timedelta(days=k)),
    "t": st.integers(0, 3).map(lambda k: dt.datetime(2024, 1, 1, k, tzinfo=UTC)),
    "n": st.integers(0, 3).map(lambda k: dt.datetime(2024, 1, 1, k)),
    "m": st.integers(-3, 3).map(lambda k: Decimal(k) / 4),
    "b": st.booleans(),
    "f": st.sampled_from([0.0, -0.0, 1.5, float("nan")]),
}
COMPARED = {
    EqualTo: lambda a, b: a == b,
    GreaterThan: lambda a, b: a > b,
    GreaterThanOrEqual: lambda a, b: a >= b,
    LessThan: lambda a, b: a < b,
    LessThanOrEqual: lambda a, b: a <= b,
}
MATCHED = {
    StringStartsWith: str.startswith,
    StringEndsWith: str.endswith,
    StringContains: lambda a, b: b in a,
}


def spark_value(f: Any, row: dict[str, Any]) -> bool | None:
    """Spark's three-valued result of filter ``f`` on ``row`` (None: NULL)."""
    if isinstance(f, Not):
        inner = spark_value(f.child, row)
        return None if inner is None else not inner
    value = row[f.attribute[0]]
    if isinstance(f, IsNull):
        return value is None
    if isinstance(f, IsNotNull):
        return value is not None
    if isinstance(f, EqualNullSafe):
        return value == f.value if value is not None else f.value is None
    if value is None:
        return None
    if isinstance(f, In):
        if value in [v for v in f.value if v is not None]:
            return True
        return None if None in f.value else False
    if type(f) in MATCHED:
        return MATCHED[type(f)](value, f.value)
    return COMPARED[type(f)](value, f.value)


@st.composite
def filters(draw: st.DrawFn) -> Any:
    column = draw(st.sampled_from(list(VALUES)))
    value = VALUES[column]
    kinds: list[Any] = [*COMPARED, EqualNullSafe, In, IsNull, IsNotNull]
    if column == "s":
        kinds += list(MATCHED)
    kind = draw(st.sampled_from(kinds))
    if kind in (IsNull, IsNotNull):
        made = kind((column,))
    elif kind is In:
        made = In((column,), tuple(draw(st.lists(st.one_of(value, st.none()), max_size=3))))
    else:
        made = kind((column,), draw(value))
    return Not(made) if draw(st.booleans()) else made


@dataclass
class Feed:
    rows: list[dict[str, Any]]

    def batch(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist(self.rows, schema=ARROW)


rows_of = st.lists(
    st.fixed_dictionaries({k: st.one_of(st.none(), v) for k, v in VALUES.items()}), max_size=12
)


@settings(max_examples=400, deadline=None)
@given(rows=rows_of, pushed=st.lists(filters(), min_size=1, max_size=3))
def test_the_cut_keeps_exactly_the_rows_spark_keeps_where_it_applies(
    rows: list[dict[str, Any]], pushed: list[Any]
) -> None:
    checks = translated(pushed, SCHEMA)
    applied = [f for f in pushed if _applies(f)]
    assert len(checks) == len(applied)  # every filter Arrow evaluates exactly is applied
    batch = Feed(rows).batch()
    got = [b.to_pylist() for b in kept_rows(checks, [batch])]
    expected = [r for r in batch.to_pylist() if all(spark_value(f, r) is True for f in applied)]
    in_order = lambda r: repr(sorted(r.items()))  # noqa: E731 (repr: NaN equals NaN)
    assert [in_order(r) for batch in got for r in batch] == [in_order(r) for r in expected]


def _applies(f: Any) -> bool:
    """The model's side of which filters the cut takes: none on floating point (NaN), none
    with a NULL in an IN list; all others."""
    inner = f.child if isinstance(f, Not) else f
    if inner.attribute[0] == "f":
        return False
    return not (isinstance(inner, In) and None in inner.value)


@dataclass(frozen=True)
class Task:
    version: int
    timestamp_ms: int
    change_type: str | None
    part: str | None = None  # the file's partition value
    path: str = "x"
    size: int = 1


KINDS = st.sampled_from(["insert", "delete", None])
PARTS = st.sampled_from(["a", "b", None])
TASKS = st.lists(
    st.builds(Task, st.integers(0, 5), st.integers(0, 5).map(lambda s: s * 1000), KINDS, PARTS),
    max_size=8,
)
CHANGELOG = T.StructType(
    [
        T.StructField("_change_type", T.StringType()),
        T.StructField("_commit_version", T.LongType()),
        T.StructField("_commit_timestamp", T.TimestampType()),
        T.StructField("i", T.LongType()),
        T.StructField("p", T.StringType()),
    ]
)


def partition_values(tasks: list[Task], names: set[str]) -> dict[str, pa.Array]:
    return {"p": pa.array([t.part for t in tasks], pa.string())} if "p" in names else {}


ON_TASKS = st.one_of(
    st.builds(
        lambda k, v: k(("_commit_version",), v), st.sampled_from(list(COMPARED)), st.integers(0, 5)
    ),
    st.builds(lambda v: In(("_commit_version",), tuple(v)), st.lists(st.integers(0, 5))),
    st.builds(
        lambda k, s: k(("_commit_timestamp",), dt.datetime.fromtimestamp(s, UTC)),
        st.sampled_from(list(COMPARED)),
        st.integers(0, 5),
    ),
    st.builds(lambda v: EqualTo(("_change_type",), v), st.sampled_from(["insert", "delete"])),
    st.builds(lambda v: StringStartsWith(("_change_type",), v), st.sampled_from(["in", "up"])),
    st.just(GreaterThan(("i",), 0)),  # a data column: no task is skipped for it
    st.builds(lambda v: EqualTo(("p",), v), st.sampled_from(["a", "b"])),
    st.builds(lambda v: In(("p",), tuple(v)), st.lists(st.sampled_from(["a", "b"]), min_size=1)),
    st.just(IsNull(("p",))),
).flatmap(lambda f: st.sampled_from([f, Not(f)]))


@settings(max_examples=300, deadline=None)
@given(
    tasks=TASKS,
    pushed=st.lists(ON_TASKS, min_size=1, max_size=3),
    relabels=st.booleans(),
    by_values=st.booleans(),
)
def test_a_task_is_skipped_exactly_when_none_of_its_rows_can_pass(
    tasks: list[Task], pushed: list[Any], relabels: bool, by_values: bool
) -> None:
    """A task's rows carry its commit's version and timestamp, its file's partition value
    (where the read may skip files by it: ``by_values``), and its own kind unless the read
    relabels rows (the row-level passes) or the file holds several (None)."""
    values = partition_values if by_values else None
    kept = kept_tasks(translated(pushed, CHANGELOG), tasks, relabels, values)

    def may_pass(task: Task) -> bool:
        row = {
            "_commit_version": task.version,
            "_commit_timestamp": dt.datetime.fromtimestamp(task.timestamp_ms / 1000, UTC),
            "_change_type": task.change_type,
            "p": task.part,
        }
        for f in pushed:
            column = (f.child if isinstance(f, Not) else f).attribute[0]
            if column == "i" or (column == "_change_type" and (relabels or not task.change_type)):
                continue  # rows of their own: the task may hold one that passes
            if column == "p" and not by_values:
                continue
            if spark_value(f, row) is not True:
                return False
        return True

    assert kept == [t for t in tasks if may_pass(t)]


GROUPED = pa.schema([("i", pa.int32()), ("d", pa.date32()), ("t", pa.timestamp("us", tz="UTC"))])
GROUPED_SPARK = T.StructType(
    [
        T.StructField("i", T.LongType()),  # the file's int32 read as Spark's long
        T.StructField("d", T.DateType()),
        T.StructField("t", T.TimestampType()),
    ]
)
ON_GROUPS = st.one_of(
    *[
        st.builds(
            lambda k, v, c=column: k((c,), v),
            st.sampled_from([*COMPARED, EqualNullSafe]),
            VALUES[source],
        )
        for column, source in (("i", "i"), ("d", "d"), ("t", "t"))
    ],
    st.builds(lambda v: In(("i",), tuple(v)), st.lists(VALUES["i"], min_size=1, max_size=3)),
    st.builds(lambda v: Not(GreaterThan(("i",), v)), VALUES["i"]),
)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.fixed_dictionaries({k: st.one_of(st.none(), VALUES[k]) for k in ("i", "d", "t")}),
        max_size=20,
    ),
    group_rows=st.integers(1, 6),
    pushed=st.lists(ON_GROUPS, min_size=1, max_size=3),
)
def test_row_groups_are_spared_only_where_no_row_of_theirs_passes(
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[dict[str, Any]],
    group_rows: int,
    pushed: list[Any],
) -> None:
    """The rows a read keeps are the same with the groups the statistics spare left out."""
    path = tmp_path_factory.mktemp("groups") / "f.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=GROUPED), path, row_group_size=group_rows)
    file = pq.ParquetFile(path)
    checks = translated(pushed, GROUPED_SPARK)
    groups = row_groups(file.metadata, file.schema_arrow, {n: n for n in GROUPED.names}, checks)
    read = file.read_row_groups(groups) if groups is not None else file.read()
    cast = {"i": pa.int64()}  # as the reader casts it
    batches = [b.cast(_declared(b.schema, cast)) for b in read.to_batches()]
    every = file.read()
    want = [b.cast(_declared(b.schema, cast)) for b in every.to_batches()]
    assert [r for b in kept_rows(checks, batches) for r in b.to_pylist()] == [
        r for b in kept_rows(checks, want) for r in b.to_pylist()
    ]


def _declared(schema: pa.Schema, cast: dict[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(f.name, cast.get(f.name, f.type)) for f in schema])


def test_a_range_on_sorted_values_reads_only_the_groups_that_hold_it(tmp_path: Any) -> None:
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"i": pa.array(range(100), pa.int32())}), path, row_group_size=10)
    file = pq.ParquetFile(path)
    checks = translated([GreaterThanOrEqual(("i",), 35), LessThan(("i",), 52)], GROUPED_SPARK)
    assert row_groups(file.metadata, file.schema_arrow, {"i": "i"}, checks) == [3, 4, 5]
    negated = translated([Not(LessThan(("i",), 95))], GROUPED_SPARK)  # NOT is Spark's alone
    assert row_groups(file.metadata, file.schema_arrow, {"i": "i"}, negated) is None
