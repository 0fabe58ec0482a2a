"""Batch post-processing: the feed shuffled once by row id, then every pass as a window.

Spark 4.3's plan (``ResolveChangelogTable``) shuffles and sorts the whole feed by
(rowId..., ``_commit_version``) for the row-level passes, and the rows that survive them a
second time by rowId for net changes. Here the feed is shuffled once, by the row id alone:
a hash partitioning by the row id clusters every (rowId, version) group as well, so the
row-level window and the net-changes window both run on it, and one sort by (rowId,
version, event rank) serves both. Where the two windows' needs differ, the second one's
order is the first one's, so Spark adds no sort between them.

The row-level window keeps its per-row work small, because its cost is paid for every row
of the feed: the deletes and inserts of a group are counted by one ``sum`` of a packed
code, not two counts of conditional expressions. The same code, descending with NULLs
first, orders a row id's events within a commit, pre-events before post-events, for net
changes: one helper column through the shuffle, not two. The measurements behind these
choices: ``tests/bench/batch.py`` (docs/benchmarks.md, the batch benchmark).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql.connect import functions as F
from pyspark.sql.connect.window import Window, WindowSpec
from spark_cdc.rewrite.names import (
    CHANGE_CODE,
    CHANGE_COUNTS,
    CHANGE_TYPE,
    COMMIT_VERSION,
    DEL_CNT,
    DELETE,
    FIRST_CHANGE_TYPE,
    HELPERS,
    IMAGE,
    INS_CNT,
    INSERT,
    LAST_CHANGE_TYPE,
    MAX_IMAGE,
    MIN_IMAGE,
    ROW_COUNT,
    ROW_NUMBER,
    UPDATE_POSTIMAGE,
    UPDATE_PREIMAGE,
)
from spark_cdc.rewrite.net_state import POST_EVENTS, PRE_EVENTS
from spark_cdc.rewrite.row_level import (
    RowLevelPasses,
    checked_change_type,
    is_single_pair,
    keep_unless,
    keyed,
    relabelled_change_type,
    row_image,
    row_version_aggregates,
    same_row_version,
)
from spark_cdc.rewrite.spec import ChangelogSpec

# A delete counts 2^32 in the packed code, an insert 1: a group's sum holds both counts
# exactly, as a window group never reaches 2^31 rows.
_DELETE_WEIGHT = 1 << 32
_INSERT_MASK = _DELETE_WEIGHT - 1


def batch_post_process(
    df: DataFrame, spec: ChangelogSpec, passes: RowLevelPasses, net: bool, compute_updates: bool
) -> DataFrame:
    """``df`` with the row-level passes ``passes`` and, if ``net``, net changes applied."""
    df, key = keyed(df, spec.row_id)
    # The code is computed before the shuffle, where the scan's rows are built anyway:
    # computed after it, it would cost every wide row one more copy before the sort. It is
    # a column, not an expression in the windows' ORDER BY: Spark does not recognise two
    # copies of an expression holding raise_error as equal, so each window function got its
    # own Window operator and its own sort of every row (2M-row net_changes benchmark:
    # 1.9-2.5 s against native's 1.1-1.3 s, before the event order was a column).
    out = df.withColumn(CHANGE_CODE, _change_code()).repartition(*key)
    if passes.any:
        out = _row_level(out, spec, passes, key, ordered=net)
    if net:
        out = _net_changes(out, spec.row_id or (), compute_updates)
    return out.drop(*HELPERS)


def _row_level(
    df: DataFrame, spec: ChangelogSpec, passes: RowLevelPasses, key: list[Column], ordered: bool
) -> DataFrame:
    group: WindowSpec = Window.partitionBy(*key, F.col(COMMIT_VERSION))
    if ordered:  # the net-changes window's order, so that one sort serves both
        group = group.orderBy(_event_order()).rowsBetween(
            Window.unboundedPreceding, Window.unboundedFollowing
        )
    by_version = passes.carryover_removal and spec.row_version is not None
    aggregates = {CHANGE_COUNTS: F.sum(CHANGE_CODE)}
    if by_version:
        aggregates.update(row_version_aggregates(spec.row_version))  # type: ignore[arg-type]
    out = df.select("*", *[agg.over(group).alias(name) for name, agg in aggregates.items()])
    counts = F.col(CHANGE_COUNTS)
    out = out.withColumns(
        {DEL_CNT: F.shiftright(counts, 32), INS_CNT: counts.bitwiseAND(F.lit(_INSERT_MASK))}
    )
    if passes.carryover_removal:
        if by_version:
            carryover = is_single_pair() & same_row_version()
        elif spec.row_id is None:  # grouped by the row image: one image per group
            carryover = is_single_pair()
        else:
            # Images are built only where a pair is possible: JSON text is not free.
            image = F.when(is_single_pair(), row_image(F.struct("*")))
            out = out.select("*", image.alias(IMAGE))
            out = out.select(
                "*",
                F.min(IMAGE).over(group).alias(MIN_IMAGE),
                F.max(IMAGE).over(group).alias(MAX_IMAGE),
            )
            carryover = is_single_pair() & (F.col(MIN_IMAGE) == F.col(MAX_IMAGE))
        out = out.where(keep_unless(carryover))
    if passes.update_detection:
        out = out.withColumn(CHANGE_TYPE, relabelled_change_type())
    return out


def _change_code() -> Column:
    """2^32 for a delete, 1 for an insert, 0 for an update's postimage, NULL for its
    preimage; any other ``_change_type`` (NULL included) fails the query through
    ``checked_change_type``. Summed, it counts a group's deletes and inserts; ordered by
    ``_event_order``, it puts the pre-events (preimage, delete) before the post-events
    (insert, postimage)."""
    change_type = F.col(CHANGE_TYPE)
    return (
        F.when(change_type == DELETE, F.lit(_DELETE_WEIGHT))
        .when(change_type == INSERT, F.lit(1))
        .when(change_type == UPDATE_POSTIMAGE, F.lit(0))
        .when(checked_change_type().isNull(), F.lit(0))  # never true: validates the rest
    )


def _event_order() -> Column:
    """A row id's events within a commit: pre-events first. A function, not a module
    constant: a column function called at import would settle PySpark's debugging setting
    before any session exists (``rewrite.column_functions``)."""
    return F.col(CHANGE_CODE).desc_nulls_first()


def _net_changes(df: DataFrame, row_id: Sequence[str], compute_updates: bool) -> DataFrame:
    """Spark's net changes: per row id, its first and last event by (commit version, pre
    before post) and the (existedBefore, existsAfter) matrix keeping and relabelling them."""
    by_row = Window.partitionBy(*[F.col(c) for c in row_id]).orderBy(
        F.col(COMMIT_VERSION).asc(), _event_order()
    )
    whole = by_row.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    out = df.select(
        "*",
        F.row_number().over(by_row).alias(ROW_NUMBER),
        F.count(F.lit(1)).over(whole).alias(ROW_COUNT),
        F.first(CHANGE_TYPE).over(whole).alias(FIRST_CHANGE_TYPE),
        F.last(CHANGE_TYPE).over(whole).alias(LAST_CHANGE_TYPE),
    )
    existed_before = F.col(FIRST_CHANGE_TYPE).isin(*PRE_EVENTS)
    exists_after = F.col(LAST_CHANGE_TYPE).isin(*POST_EVENTS)
    is_first = F.col(ROW_NUMBER) == 1
    is_last = F.col(ROW_NUMBER) == F.col(ROW_COUNT)
    keep = (
        F.when(~existed_before & ~exists_after, F.lit(False))
        .when(~existed_before, is_last)
        .when(~exists_after, is_first)
        .otherwise(is_first | is_last)
    )
    pre, post = (UPDATE_PREIMAGE, UPDATE_POSTIMAGE) if compute_updates else (DELETE, INSERT)
    both = existed_before & exists_after
    relabel = (
        F.when(~existed_before & is_last, F.lit(INSERT))
        .when(~exists_after & is_first, F.lit(DELETE))
        .when(both & is_first, F.lit(pre))
        .when(both & is_last, F.lit(post))
        .otherwise(F.col(CHANGE_TYPE))
    )
    return out.where(keep).withColumn(CHANGE_TYPE, relabel)
