"""Batch row-level passes: a window over (rowId..., _commit_version), as Spark plans it."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.connect import functions as F
from pyspark.sql.connect.window import Window
from spark_cdc.rewrite.names import (
    CHANGE_TYPE,
    COMMIT_VERSION,
    HELPERS,
    IMAGE,
    MAX_IMAGE,
    MIN_IMAGE,
)
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


def batch_row_level(df: DataFrame, spec: ChangelogSpec, passes: RowLevelPasses) -> DataFrame:
    df, key = keyed(df, spec.row_id)
    group = Window.partitionBy(*key, F.col(COMMIT_VERSION))
    by_version = passes.carryover_removal and spec.row_version is not None
    aggregates = group_aggregates(spec.row_version if by_version else None)
    out = df.select("*", *[agg.over(group).alias(name) for name, agg in aggregates.items()])

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
    return out.drop(*HELPERS)
