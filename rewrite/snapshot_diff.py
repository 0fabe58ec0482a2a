"""``snapshot_changes``: the changes between two snapshots of a table, as a change feed.

A table without a changelog (a nightly dump, a JDBC read, a folder of Parquet files) still
changes from one snapshot to the next; compared by key, two snapshots give its changes in
Spark's changelog shape, which ``post_process``, ``apply_changes`` and any consumer of
``changes()`` read.

The plan is the cheapest exact one: a full outer join of the two snapshots on the key (one
shuffle and sort of each side), each side's rows counted per key by a window over that same
partitioning and order (so the counts cost no shuffle of their own). Each joined pair is
compared whole, NULL-safely; only the keys that changed become rows again (``inline``), so
nothing of an unchanged key outlives the join. A key with more than one row on a side, or a
NULL key, raises a named error in the query. The plan reads no schema: building it makes no
round trip, and the columns are those of ``after`` (widened by name with ``before``'s, as
``unionByName`` does: both sides are taken from that union). An outer join leaves either
side's row absent, so the output's columns are nullable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql.connect import functions as F
from spark_cdc.rewrite.errors import cdc_error
from spark_cdc.rewrite.names import (
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    DELETE,
    HELPER_PREFIX,
    INSERT,
    UPDATE_POSTIMAGE,
    UPDATE_PREIMAGE,
    quoted,
)
from spark_cdc.rewrite.options import OptionValue, parse_options
from spark_cdc.rewrite.plan_tree import reads_a_stream
from spark_cdc.rewrite.raised import raise_in_query
from spark_cdc.server_plugin.vocabulary import RANGE_OPTIONS

# The helper columns of the plan (none survives it).
ROW = HELPER_PREFIX + "row"  # a change's row, whole, as one struct
SIDE = HELPER_PREFIX + "side"  # 0: before, 1: after
# Per side (before's, after's): its row of the key, whole, and its rows of the key.
SIDE_ROW = (HELPER_PREFIX + "before_row", HELPER_PREFIX + "after_row")
SIDE_ROWS = (HELPER_PREFIX + "before_rows", HELPER_PREFIX + "after_rows")
KIND = HELPER_PREFIX + "kind"  # a change's _change_type


def snapshot_changes(
    before: DataFrame,
    after: DataFrame,
    keys: Sequence[str],
    version: int | Column,
    *,
    version_column: str = COMMIT_VERSION,
    commit_timestamp: datetime | Column | None = None,
    compare_column_list: Sequence[str] | None = None,
    compare_except_column_list: Sequence[str] | None = None,
    allow_missing_columns: bool = False,
    options: Mapping[str, OptionValue] | None = None,
    _unique_before: bool = False,
) -> DataFrame:
    """The changes that turn snapshot ``before`` into snapshot ``after``, rows identified by
    ``keys``: a key only in ``after`` is an ``insert``, a key only in ``before`` a
    ``delete`` (with ``before``'s values), a key in both whose values differ an update; a
    key whose values are equal gives nothing. Values are compared NULL-safely and as their
    types compare (NaN equals NaN, -0.0 equals 0.0, a string by its collation).

    An update is Spark's pair: ``update_preimage`` and ``update_postimage`` with
    ``computeUpdates``, else ``delete`` and ``insert`` (Spark's default). The other
    post-processing options mean nothing here (a diff has no carry-overs and is net by
    construction): ``deduplicationMode`` is checked and has no effect, and a range option
    is refused.

    Parameters
    ----------
    before, after : DataFrame
        The two snapshots, batch DataFrames; their columns are matched by name.
    keys : list of str
        The columns that identify a row. A key with two rows on one side, or a NULL key,
        fails the query with ``SNAPSHOT_CHANGES.DUPLICATE_KEY``/``NULL_KEY``.
    version : int or Column
        The diff's version (``after``'s), written to ``version_column``.
    version_column : str
        Its name; ``_commit_version`` by default, as Spark's changelogs name it.
    commit_timestamp : datetime or Column, optional
        When given, written to ``_commit_timestamp``: with it the output is a whole
        changelog (``apply_changes`` reads it as one).
    compare_column_list, compare_except_column_list : list of str, optional
        Only these columns, or all but these, decide whether a key changed (the output has
        every column either way). One of the two, as Spark's ``*_column_list`` pairs.
    allow_missing_columns : bool
        ``unionByName``'s: a column only one snapshot has is NULL in the other (a column
        added to the table changes every key it holds a value for); by default it fails
        the query's analysis, naming the column.
    options : mapping, optional
        Spark's CDC options, by Spark's names: ``computeUpdates``, ``deduplicationMode``.

    Returns
    -------
    DataFrame
        ``after``'s columns, then ``_change_type``, ``version_column`` and, when given,
        ``_commit_timestamp``.

    Examples
    --------
    >>> from spark_cdc import snapshot_changes
    >>> yesterday = spark.read.parquet("/dumps/customers/2026-12-03")
    >>> today = spark.read.parquet("/dumps/customers/2026-12-04")
    >>> changes = snapshot_changes(yesterday, today, keys=["customer_id"], version=20261204,
    ...     options={"computeUpdates": True})
    """
    for name, snapshot in (("before", before), ("after", after)):
        if reads_a_stream(snapshot):
            raise cdc_error("SNAPSHOT_CHANGES.STREAMING_SNAPSHOT", side=name)
    keys = _names("keys", keys, required=True)
    compared = _compared(compare_column_list, compare_except_column_list)
    compute_updates = _compute_updates(options)
    version_value = _version(version)
    if not isinstance(version_column, str) or not version_column:
        raise cdc_error(
            "SNAPSHOT_CHANGES.INVALID_PARAMETER",
            parameter="version_column",
            problem=f"is {version_column!r}",
            fix="name the column the version is written to, such as '_commit_version'",
        )
    timestamp = _timestamp(commit_timestamp)
    if not isinstance(allow_missing_columns, bool):
        raise cdc_error(
            "SNAPSHOT_CHANGES.INVALID_PARAMETER",
            parameter="allow_missing_columns",
            problem=f"is {allow_missing_columns!r}",
            fix="pass True or False",
        )

    rows = after.withColumn(SIDE, F.lit(1)).unionByName(
        before.withColumn(SIDE, F.lit(0)), allowMissingColumns=allow_missing_columns
    )
    by_key = Window.partitionBy(*[F.col(quoted(k)) for k in keys])

    def side(number: int) -> DataFrame:
        """One side of the union (the optimizer drops the other branch), its row whole."""
        one = rows.filter(F.col(SIDE) == number).drop(SIDE)
        # ``_unique_before``: the caller vouches that ``before`` holds each key once (a
        # target version apply_changes_from_snapshot wrote or counted already), sparing
        # the window, the plan's costliest step beside the join.
        counted = F.lit(1) if number == 0 and _unique_before else F.count(F.lit(1)).over(by_key)
        return one.select(
            *[F.col(quoted(k)) for k in keys],
            F.struct(F.col("*")).alias(SIDE_ROW[number]),
            counted.alias(SIDE_ROWS[number]),
        )

    joined = side(0).join(side(1), on=keys, how="full_outer")
    old, new = F.col(SIDE_ROW[0]), F.col(SIDE_ROW[1])
    changed = old.isNull() | new.isNull() | ~compared(old).eqNullSafe(compared(new))
    kept = joined.filter(_checked(keys, changed))
    pre, post = (UPDATE_PREIMAGE, UPDATE_POSTIMAGE) if compute_updates else (DELETE, INSERT)
    images = F.array(
        F.struct(
            old.alias(ROW), F.when(new.isNull(), F.lit(DELETE)).otherwise(F.lit(pre)).alias(KIND)
        ),
        F.struct(
            new.alias(ROW), F.when(old.isNull(), F.lit(INSERT)).otherwise(F.lit(post)).alias(KIND)
        ),
    )
    present = F.filter(images, lambda image: image.getField(ROW).isNotNull())
    metadata = [F.col(KIND).alias(CHANGE_TYPE), version_value.alias(version_column)]
    if timestamp is not None:
        metadata.append(timestamp.alias(COMMIT_TIMESTAMP))
    return kept.select(F.inline(present)).select(F.col(f"{ROW}.*"), *metadata)


def _checked(keys: list[str], changed: Column) -> Column:
    """``changed``, or the query's refusal of a NULL key or of a key twice on one side
    (a joined row: its key columns are either side's, a NULL key's row is alone)."""
    key = F.to_json(F.struct(*[F.col(quoted(k)) for k in keys]), {"ignoreNullFields": "false"})
    side = F.when(F.col(SIDE_ROW[1]).isNotNull(), F.lit("after")).otherwise(F.lit("before"))
    before_count, after_count = (F.coalesce(F.col(c), F.lit(0)) for c in SIDE_ROWS)
    refusals = [
        (
            F.col(quoted(name)).isNull(),
            raise_in_query("SNAPSHOT_CHANGES.NULL_KEY", side=side, column=F.lit(name), key=key),
        )
        for name in keys
    ]
    refusals.append(
        (
            (after_count > 1) | (before_count > 1),
            raise_in_query(
                "SNAPSHOT_CHANGES.DUPLICATE_KEY",
                side=F.when(after_count > 1, F.lit("after")).otherwise(F.lit("before")),
                count=F.greatest(after_count, before_count),
                key=key,
            ),
        )
    )
    check = F.when(*refusals[0])
    for condition, refusal in refusals[1:]:
        check = check.when(condition, refusal)
    return check.otherwise(changed)


def _compared(only: Sequence[str] | None, other_than: Sequence[str] | None) -> Any:
    """What of a row decides whether its key changed: a function of the row's struct."""
    if only and other_than:
        raise cdc_error(
            "SNAPSHOT_CHANGES.INVALID_PARAMETER",
            parameter="compare_column_list",
            problem="is given with compare_except_column_list",
            fix="pass one of the two",
        )
    if only:
        names = _names("compare_column_list", only)
        return lambda row: F.struct(*[row.getField(n).alias(n) for n in names])
    if other_than:
        names = _names("compare_except_column_list", other_than)
        # ``dropFields`` drops nothing of a name that is no column: the ``getField``s fail
        # the analysis then, so a misspelt name is refused instead of comparing everything.
        return lambda row: F.when(
            F.struct(*[row.getField(n).alias(n) for n in names]).isNotNull(),
            row.dropFields(*names),
        )
    return lambda row: row


def _names(parameter: str, given: Any, required: bool = False) -> list[str]:
    """A list of distinct column names (checked against the snapshots by Spark's analysis,
    which names a missing one)."""
    if given is None and not required:
        return []
    if (
        isinstance(given, str)
        or not isinstance(given, Sequence)
        or not all(isinstance(n, str) and n for n in given)
        or len(set(given)) != len(given)
    ):
        raise cdc_error(
            "SNAPSHOT_CHANGES.INVALID_PARAMETER",
            parameter=parameter,
            problem=f"is {given!r}",
            fix="pass a list of distinct column names",
        )
    if required and not given:
        raise cdc_error(
            "SNAPSHOT_CHANGES.INVALID_PARAMETER",
            parameter=parameter,
            problem="is empty",
            fix="name at least one column",
        )
    return list(given)


def _compute_updates(options: Mapping[str, OptionValue] | None) -> bool:
    """Spark's options, checked as ``post_process`` checks them; a range refused."""
    given = dict(options or {})
    for name in given:
        if name.lower() in {o.lower() for o in RANGE_OPTIONS}:  # a diff has no range
            raise cdc_error("SNAPSHOT_CHANGES.OPTION_NOT_APPLICABLE", option=name)
    return parse_options(given).compute_updates


def _version(version: Any) -> Column:
    if isinstance(version, Column):
        return version
    if isinstance(version, bool) or not isinstance(version, int):
        raise cdc_error(
            "SNAPSHOT_CHANGES.INVALID_PARAMETER",
            parameter="version",
            problem=f"is {version!r}",
            fix="pass the after snapshot's version as an int, or a Column",
        )
    return F.lit(version).cast("long")


def _timestamp(value: Any) -> Column | None:
    if value is None or isinstance(value, Column):
        return value
    if isinstance(value, datetime):
        return F.lit(value).cast("timestamp")
    raise cdc_error(
        "SNAPSHOT_CHANGES.INVALID_PARAMETER",
        parameter="commit_timestamp",
        problem=f"is {value!r}",
        fix="pass a datetime or a Column, or leave it out",
    )
