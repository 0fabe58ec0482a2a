"""Filters Spark pushes to a change-feed batch read (Spark 4.1+, with
``spark.sql.python.filterPushdown.enabled``), applied where they save the most, and trusted
to us for nothing.

- Every filter is handed back to Spark, which evaluates it again after the scan. What we
  apply is an early cut: it must keep every row Spark keeps, and it keeps exactly those
  where it is applied at all. A filter Arrow cannot evaluate as Spark does (floating point,
  where NaN equals NaN and is the largest value; strings under a collation; nested fields)
  is left to Spark alone.
- The rows a task yields are filtered before they are handed to the JVM. The hand-off costs
  more than reading the files (``docs/benchmarks.md``), so a selective filter is most of a
  query's saving, whatever the table's layout.
- Where a task reads its files' rows as they are (no row-level passes), a file's row groups
  whose statistics exclude every row a filter keeps are not decoded (``row_groups``).
- A filter on ``_commit_version`` or ``_commit_timestamp`` skips whole commits while the
  read is planned: they are constant over a commit, and the row-level passes resolve one
  commit at a time, so what a skipped commit would have given is what the filter drops. A
  filter on ``_change_type`` skips a file of one kind only in a read that does not relabel
  its rows (no row-level passes).

Why a reader offers ``pushFilters`` only when asked: PySpark fails every read of a reader that
defines it on a server where the setting is off (``DATA_SOURCE_PUSHDOWN_DISABLED``), and the
source cannot read the setting. The process that plans the read can: ``planner_pushes``.

Why only on a server that declares its plan cache off (``SAFE_ENV``): Spark keeps the read a
pushdown planned (the reader with its filters, the partitions it kept) on the data source
object of the relation, and a scan of the same relation that pushes nothing reads it again.
Spark Connect's plan cache (on by default) shares that relation between the queries that
send the same DataFrame, and between both sides of ``df.union(df.where(...))``: measured on
4.1 and 4.3, the later ``df.count()`` counted the earlier filtered query's rows, and the
union lost the unfiltered side's. So Spark, not the filter, would drop rows. A server started with
``spark.connect.session.planCache.maxSize=0`` (static: no session can turn the cache back
on) analyses every query afresh; ours set it, and ``SAFE_ENV`` in the server's environment,
which its Python workers inherit.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T
from spark_cdc.server_plugin.arrow_types import arrow_type
from spark_cdc.server_plugin.vocabulary import (
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    METADATA_COLUMNS,
)

# Set (to "true") in the environment of a server started with ``PLAN_CACHE_SIZE`` at 0.
SAFE_ENV = "SPARK_CDC_FILTER_PUSHDOWN"
PLAN_CACHE_SIZE = "spark.connect.session.planCache.maxSize"

# PySpark's planning workers: the one that pushes filters (4.1+, the setting on), and the
# one that plans without them, which knows whether the setting is on (``enable_pushdown``).
_PUSHING_WORKER = "data_source_pushdown_filters.py"
_PLANNING_WORKER = "plan_data_source_read.py"

# Comparisons whose Arrow function is Spark's on the types ``_exact`` admits.
_COMPARISONS = {
    "EqualTo": "equal",
    "GreaterThan": "greater",
    "GreaterThanOrEqual": "greater_equal",
    "LessThan": "less",
    "LessThanOrEqual": "less_equal",
}
_STRING_MATCHES = {
    "StringStartsWith": "starts_with",
    "StringEndsWith": "ends_with",
    "StringContains": "match_substring",
}


def planner_pushes() -> bool:
    """Whether the PySpark process calling ``DataSource.reader`` plans a read that pushes
    filters, on a server whose plan cache is off (``SAFE_ENV``): a reader with
    ``pushFilters`` is refused anywhere else. Spark 4.0 has neither worker's switch, and a
    reader made outside a planning worker (a test's) pushes none."""
    if os.environ.get(SAFE_ENV) != "true":
        return False
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = os.path.basename(frame.f_code.co_filename)
        if name == _PUSHING_WORKER:
            return True
        if name == _PLANNING_WORKER:
            return frame.f_locals.get("enable_pushdown") is True
        frame = frame.f_back
    return False


@dataclass(frozen=True)
class Check:
    """One pushed filter as Arrow evaluates it: ``kind`` (a ``pyspark.sql.datasource``
    filter's class name), the column, the value (an Arrow scalar of the column's type, an
    Arrow array for ``In``, the text for a string match), ``negated``."""

    kind: str
    column: str
    value: Any = None
    negated: bool = False

    def mask(self, batch: pa.RecordBatch) -> pa.Array:
        """True where the row passes, False or NULL where it does not (Spark's three-valued
        logic: NOT of NULL is NULL, and a NULL row is dropped either way)."""
        column = batch.column(self.column)
        if self.kind == "IsNull":
            result = pc.is_null(column)
        elif self.kind == "IsNotNull":
            result = pc.is_valid(column)
        elif self.kind == "EqualNullSafe":  # the value is not NULL (``_translated``)
            result = pc.fill_null(pc.equal(column, self.value), False)
        elif self.kind == "In":
            options = pc.SetLookupOptions(self.value, skip_nulls=True)
            result = pc.if_else(pc.is_valid(column), pc.is_in(column, options=options), None)
        elif self.kind in _STRING_MATCHES:
            result = getattr(pc, _STRING_MATCHES[self.kind])(column, pattern=self.value)
        else:
            result = getattr(pc, _COMPARISONS[self.kind])(column, self.value)
        return pc.invert(result) if self.negated else result


def translated(filters: Sequence[Any], schema: T.StructType) -> list[Check]:
    """The filters Arrow evaluates as Spark does on ``schema``'s columns (the others are
    Spark's alone)."""
    fields = {f.name: f for f in schema.fields}
    checks = []
    for given in filters:
        check = _translated(given, fields)
        if check is not None:
            checks.append(check)
    return checks


def _translated(given: Any, fields: dict[str, T.StructField]) -> Check | None:
    negated = type(given).__name__ == "Not"
    inner = given.child if negated else given
    kind = type(inner).__name__
    path: tuple[str, ...] = tuple(getattr(inner, "attribute", ()))
    if len(path) != 1 or path[0] not in fields:
        return None
    field = fields[path[0]]
    arrow = _exact(field.dataType)
    if arrow is None:
        return None
    if kind in ("IsNull", "IsNotNull"):
        return Check(kind, field.name, None, negated)
    value = inner.value
    if kind == "In":
        # NULL IN (...) is NULL, and so is x IN (.., NULL) when x is not in it: a NULL in
        # the list would need Spark's logic under NOT. Left to Spark.
        if not isinstance(value, (list, tuple)) or any(v is None for v in value):
            return None
        try:
            return Check(kind, field.name, pa.array(list(value), arrow), negated)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return None
    if value is None or kind not in (*_COMPARISONS, *_STRING_MATCHES, "EqualNullSafe"):
        return None
    if kind in _STRING_MATCHES:
        return Check(kind, field.name, value, negated) if pa.types.is_string(arrow) else None
    try:
        scalar = pa.scalar(value, arrow)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    return Check(kind, field.name, scalar, negated)


def _exact(data_type: T.DataType) -> pa.DataType | None:
    """The Arrow type of a column whose comparisons Arrow makes as Spark does, else None."""
    if isinstance(data_type, (T.FloatType, T.DoubleType)):
        return None  # NaN: equal to itself and above every number in Spark, not in Arrow
    if isinstance(data_type, T.StringType):
        collation = getattr(data_type, "collation", "UTF8_BINARY")
        return pa.string() if collation in (None, "UTF8_BINARY") else None
    if isinstance(
        data_type,
        (
            T.BooleanType,
            T.ByteType,
            T.ShortType,
            T.IntegerType,
            T.LongType,
            T.BinaryType,
            T.DateType,
            T.TimestampType,
            T.TimestampNTZType,
            T.DecimalType,
        ),
    ):
        return arrow_type(data_type)
    return None


def kept_rows(
    checks: Sequence[Check], batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``batches`` without the rows a check drops; none left, no batch."""
    if not checks:
        yield from batches
        return
    for batch in batches:
        mask = checks[0].mask(batch)
        for check in checks[1:]:
            mask = pc.and_kleene(mask, check.mask(batch))
        kept = batch.filter(mask, null_selection_behavior="drop")
        if kept.num_rows:
            yield kept


def kept_tasks(
    checks: Sequence[Check],
    tasks: Sequence[Any],
    relabels: bool,
    constants: Callable[[Sequence[Any], set[str]], dict[str, pa.Array]] | None = None,
) -> list[Any]:
    """The file tasks whose commits (and, where the read keeps its files' labels, kinds) can
    give a row the checks keep: those on the changelog columns, evaluated per task, and on
    the columns ``constants`` gives a value per task for, of those asked (a file's
    partition values, where skipping a file cannot change another's rows' labels)."""
    given = set() if constants is None else {c.column for c in checks} - set(METADATA_COLUMNS)
    on = {COMMIT_VERSION, COMMIT_TIMESTAMP} | (set() if relabels else {CHANGE_TYPE}) | given
    relevant = [c for c in checks if c.column in on]
    if not relevant or not tasks:
        return list(tasks)
    labels = [t.change_type for t in tasks]
    columns = {
        COMMIT_VERSION: pa.array([t.version for t in tasks], pa.int64()),
        COMMIT_TIMESTAMP: pa.array(
            [t.timestamp_ms * 1000 for t in tasks], pa.timestamp("us", tz="UTC")
        ),
        CHANGE_TYPE: pa.array(labels, pa.string()),
        **(constants(tasks, given) if constants is not None and given else {}),
    }
    relevant = [c for c in relevant if c.column in columns]
    table = pa.RecordBatch.from_pydict(columns)
    keep = pa.array([True] * len(tasks))
    for check in relevant:
        passes = pc.fill_null(check.mask(table), False)
        if check.column == CHANGE_TYPE:  # a CDC file's rows carry their own labels
            passes = pc.or_(passes, pc.is_null(table.column(CHANGE_TYPE)))
        keep = pc.and_(keep, passes)
    return [t for t, k in zip(tasks, keep.to_pylist(), strict=True) if k]


# What a row group's [min, max] must meet for a row of it to pass a check (NULLs pass none).
_REACHABLE: dict[str, Callable[[Any, Any, Any], bool]] = {
    "EqualTo": lambda low, high, v: low <= v <= high,
    "EqualNullSafe": lambda low, high, v: low <= v <= high,
    "GreaterThan": lambda low, high, v: high > v,
    "GreaterThanOrEqual": lambda low, high, v: high >= v,
    "LessThan": lambda low, high, v: low < v,
    "LessThanOrEqual": lambda low, high, v: low <= v,
    "In": lambda low, high, values: any(low <= v <= high for v in values),
}


def row_groups(
    metadata: Any, file_schema: pa.Schema, columns: dict[str, str], checks: Sequence[Check]
) -> list[int] | None:
    """The row groups of a Parquet file that may hold a row every check keeps, by their
    statistics (None: all). Only where a file column has the type the read declares (or
    both are integers), and only integers, dates and timestamps: what their statistics'
    order is sure to be (old writers ordered strings as signed bytes). ``columns``: the
    checks' column names to the file's."""
    usable = []
    for check in checks:
        name = columns.get(check.column)
        if check.negated or check.kind not in _REACHABLE or name is None:
            continue
        field = file_schema.field(name) if name in file_schema.names else None
        if field is None or not _ordered(field.type, check.value.type):
            continue
        value = check.value.to_pylist() if check.kind == "In" else check.value.as_py()
        usable.append((name, check.kind, value))
    if not usable:
        return None
    leaf = {metadata.schema.column(j).path: j for j in range(metadata.num_columns)}
    kept = []
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        if all(_reachable(row_group, leaf.get(name), kind, value) for name, kind, value in usable):
            kept.append(group)
    return kept


def _ordered(found: pa.DataType, declared: pa.DataType) -> bool:
    if pa.types.is_integer(found) and pa.types.is_integer(declared):
        return True
    return found == declared and (pa.types.is_date(found) or pa.types.is_timestamp(found))


def _reachable(row_group: Any, column: int | None, kind: str, value: Any) -> bool:
    if column is None:
        return True
    chunk = row_group.column(column)
    statistics = chunk.statistics
    if statistics is None or not statistics.has_min_max or chunk.physical_type == "INT96":
        return True
    try:
        return bool(_REACHABLE[kind](statistics.min, statistics.max, value))
    except TypeError:  # values Python cannot order against each other: keep the group
        return True
