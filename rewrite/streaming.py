"""Streaming row-level passes, built from what a stream allows (no ``Window``).

NULL guard -> zero-delay watermark on ``_commit_timestamp`` -> aggregate per
(rowId..., _commit_version, _commit_timestamp) buffering every row -> carry-over filter ->
``inline`` -> relabel -> drop helpers -> ``_commit_timestamp`` without watermark metadata.
A group is released once the watermark passes its commit, i.e. one micro-batch after the
commit arrived; every row of a commit shares one timestamp, so no group is split.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql.connect import functions as F
from spark_cdc.rewrite.names import (
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    DEL_CNT,
    EVENTS,
    HELPERS,
    INS_CNT,
    ROW_KEY,
)
from spark_cdc.rewrite.raised import raise_in_query
from spark_cdc.rewrite.row_level import (
    RowLevelPasses,
    group_aggregates,
    is_single_pair,
    keep_unless,
    keyed,
    relabelled_change_type,
    row_image,
    same_row_version,
)
from spark_cdc.rewrite.spec import ChangelogSpec


def streaming_row_level(df: DataFrame, spec: ChangelogSpec, passes: RowLevelPasses) -> DataFrame:
    watermarked, key = keyed(with_commit_watermark(df), spec.row_id)
    by_version = passes.carryover_removal and spec.row_version is not None
    aggregates = group_aggregates(spec.row_version if by_version else None)
    # Without a row id the key already is the row image: the buffered rows need not hold it.
    event = F.struct("*") if spec.row_id is not None else F.struct("*").dropFields(ROW_KEY)
    grouped = watermarked.groupBy(*key, F.col(COMMIT_VERSION), F.col(COMMIT_TIMESTAMP)).agg(
        *[agg.alias(name) for name, agg in aggregates.items()],
        F.collect_list(event).alias(EVENTS),
    )
    if passes.carryover_removal:
        if by_version:
            carryover = is_single_pair() & same_row_version()
        elif spec.row_id is None:  # one image per group by construction
            carryover = is_single_pair()
        else:
            distinct_images = F.array_distinct(F.transform(F.col(EVENTS), row_image))
            carryover = is_single_pair() & (F.size(distinct_images) == 1)
        grouped = grouped.where(keep_unless(carryover))
    rows = grouped.select(DEL_CNT, INS_CNT, F.inline(EVENTS))
    if passes.update_detection:
        rows = rows.withColumn(CHANGE_TYPE, relabelled_change_type())
    return without_watermark_metadata(rows.drop(*HELPERS))


def with_commit_watermark(df: DataFrame) -> DataFrame:
    """Fail on NULL commit timestamps, then watermark on them with zero delay.

    A NULL group key never falls below the watermark: its rows would sit in state forever.
    """
    return df.where(_commit_timestamp_present()).withWatermark(COMMIT_TIMESTAMP, "0 seconds")


def _commit_timestamp_present() -> Column:
    # Spark folds isnull(c) to false when c is declared NOT NULL, yet a source may declare
    # it and still send a NULL. ``try_add`` is always nullable, so this test stays put
    # (a cast or plain arithmetic does not: both inherit the column's nullability).
    probe = F.try_add(F.col(COMMIT_TIMESTAMP), F.expr("INTERVAL 0 SECONDS"))
    error = raise_in_query("CHANGELOG_CONTRACT_VIOLATION.NULL_COMMIT_TIMESTAMP")
    return F.when(probe.isNull(), error).otherwise(F.lit(True))


def without_watermark_metadata(df: DataFrame) -> DataFrame:
    """Clear our watermark's marker so a user's own ``withWatermark`` acts as if alone.

    ``alias(name, metadata={})`` does not clear it on 4.0 servers; a cast does on all.
    """
    return df.withColumn(COMMIT_TIMESTAMP, F.col(COMMIT_TIMESTAMP).cast("timestamp"))
