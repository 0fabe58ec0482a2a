"""Expressions shared by the batch and streaming row-level passes.

A group is one row id in one commit. Its delete/insert counts drive both passes:
carry-over removal drops a group holding exactly one delete and one insert of the same
row image; update detection relabels a group's delete+insert pair as an update.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql.connect import functions as F
from spark_cdc.rewrite.names import (
    CHANGE_TYPE,
    CHANGE_TYPES,
    COMMIT_VERSION,
    DEL_CNT,
    DELETE,
    HELPERS,
    INS_CNT,
    INSERT,
    MAX_RV,
    METADATA_COLUMNS,
    MIN_RV,
    ROW_KEY,
    RV_CNT,
    UPDATE_POSTIMAGE,
    UPDATE_PREIMAGE,
)
from spark_cdc.rewrite.raised import raise_in_query


@dataclass(frozen=True)
class RowLevelPasses:
    carryover_removal: bool
    update_detection: bool

    @property
    def any(self) -> bool:
        return self.carryover_removal or self.update_detection


# to_json settings that keep every distinction a comparison or a round trip through
# from_json needs: microseconds on timestamps (the default stops at milliseconds) and
# explicit nulls.
EXACT_JSON_OPTIONS = {
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
    "ignoreNullFields": "false",
}


def checked_change_type() -> Column:
    """``_change_type``, failing the query on a NULL or unknown value instead of miscounting."""
    change_type = F.col(CHANGE_TYPE)
    error = raise_in_query(
        "CHANGELOG_CONTRACT_VIOLATION.UNEXPECTED_CHANGE_TYPE", changeType=change_type
    )
    return F.when(change_type.isin(*CHANGE_TYPES), change_type).otherwise(error)


def group_aggregates(row_version: str | None) -> dict[str, Column]:
    """Per-group helper aggregates by name, for the streaming aggregate (batch: ``rewrite.batch``).

    Counts of deletes and inserts always; with a row version, its min, max and non-NULL
    count (for carry-over removal).
    """
    change_type = checked_change_type()
    aggregates = {
        DEL_CNT: F.count(F.when(change_type == DELETE, F.lit(1))),
        INS_CNT: F.count(F.when(change_type == INSERT, F.lit(1))),
    }
    if row_version is not None:
        aggregates.update(row_version_aggregates(row_version))
    return aggregates


def row_version_aggregates(row_version: str) -> dict[str, Column]:
    """A group's row-version bounds and non-NULL count, by name (carry-over removal by
    row version, batch and streaming)."""
    version = F.col(row_version)
    return {MIN_RV: F.min(version), MAX_RV: F.max(version), RV_CNT: F.count(version)}


def is_single_pair() -> Column:
    return (F.col(DEL_CNT) == 1) & (F.col(INS_CNT) == 1)


def same_row_version() -> Column:
    """Spark's test: two non-NULL row versions, and they are equal."""
    return (F.col(RV_CNT) == 2) & (F.col(MIN_RV) == F.col(MAX_RV))


def row_image(row: Column) -> Column:
    """A NULL-safe, comparable image of a row's data columns, maps and nesting included.

    Spark cannot compare maps with ``=``, so rows are compared through their JSON text.
    Equal rows give equal text; the text is only built for candidate pairs.
    """
    return F.to_json(row.dropFields(*METADATA_COLUMNS, *HELPERS), EXACT_JSON_OPTIONS)


def keyed(df: DataFrame, row_id: Sequence[str] | None) -> tuple[DataFrame, list[Column]]:
    """``df`` and the columns its groups are keyed by: the row id, or without one a helper
    column holding the whole row's image (a star cannot appear in a grouping key)."""
    if row_id is None:
        return df.withColumn(ROW_KEY, row_image(F.struct("*"))), [F.col(ROW_KEY)]
    return df, [F.col(c) for c in row_id]


def relabelled_change_type() -> Column:
    """Spark's relabel: one delete + one insert become an update; more is a contract breach."""
    deletes, inserts = F.col(DEL_CNT), F.col(INS_CNT)
    change_type = F.col(CHANGE_TYPE)
    error = raise_in_query(
        "CHANGELOG_CONTRACT_VIOLATION.UNEXPECTED_MULTIPLE_CHANGES_PER_ROW_VERSION",
        version=F.col(COMMIT_VERSION),
        deletes=deletes,
        inserts=inserts,
    )
    update = (
        F.when(change_type == INSERT, F.lit(UPDATE_POSTIMAGE))
        .when(change_type == DELETE, F.lit(UPDATE_PREIMAGE))
        .otherwise(change_type)
    )
    return (
        F.when((deletes > 1) | (inserts > 1), error)
        .when(is_single_pair(), update)
        .otherwise(change_type)
    )


def keep_unless(carryover: Column) -> Column:
    """Filter condition dropping carry-over groups; a NULL test result keeps the rows."""
    return ~F.coalesce(carryover, F.lit(False))
