"""The helper columns a rewrite adds, beside the changelog vocabulary it re-exports."""

from __future__ import annotations

from spark_cdc.server_plugin.vocabulary import (
    CHANGE_TYPE,
    CHANGE_TYPES,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    DELETE,
    INSERT,
    METADATA_COLUMNS,
    UPDATE_POSTIMAGE,
    UPDATE_PREIMAGE,
)

__all__ = [
    "CHANGE_TYPE",
    "CHANGE_TYPES",
    "COMMIT_TIMESTAMP",
    "COMMIT_VERSION",
    "DELETE",
    "INSERT",
    "METADATA_COLUMNS",
    "UPDATE_POSTIMAGE",
    "UPDATE_PREIMAGE",
]

# Reserved prefix for the helper columns a rewrite adds; input columns must not use it.
HELPER_PREFIX = "__spark_cdc_"
DEL_CNT = HELPER_PREFIX + "del_cnt"
CHANGE_CODE = HELPER_PREFIX + "change_code"  # batch: 1 for a delete, 2^32 for an insert
CHANGE_COUNTS = HELPER_PREFIX + "change_counts"  # batch: the sum of a group's change codes
INS_CNT = HELPER_PREFIX + "ins_cnt"
MIN_RV = HELPER_PREFIX + "min_rv"
MAX_RV = HELPER_PREFIX + "max_rv"
RV_CNT = HELPER_PREFIX + "rv_cnt"
IMAGE = HELPER_PREFIX + "image"
MIN_IMAGE = HELPER_PREFIX + "min_image"
MAX_IMAGE = HELPER_PREFIX + "max_image"
EVENTS = HELPER_PREFIX + "events"
IS_CARRYOVER = HELPER_PREFIX + "is_carryover"
ROW_KEY = HELPER_PREFIX + "row_key"  # the whole-row identity of a feed without a row id
# Net changes: the batch window's helpers, Spark's names.
ROW_NUMBER = HELPER_PREFIX + "row_number"
ROW_COUNT = HELPER_PREFIX + "row_count"
FIRST_CHANGE_TYPE = HELPER_PREFIX + "first_row_change_type_value"
LAST_CHANGE_TYPE = HELPER_PREFIX + "last_row_change_type_value"
HELPERS = (
    DEL_CNT,
    CHANGE_CODE,
    CHANGE_COUNTS,
    INS_CNT,
    MIN_RV,
    MAX_RV,
    RV_CNT,
    IMAGE,
    MIN_IMAGE,
    MAX_IMAGE,
    EVENTS,
    IS_CARRYOVER,
    ROW_KEY,
    ROW_NUMBER,
    ROW_COUNT,
    FIRST_CHANGE_TYPE,
    LAST_CHANGE_TYPE,
)


def row_id_helper(index: int) -> str:
    """The streaming key column for the row id's ``index``-th part (Spark's name)."""
    return f"{HELPER_PREFIX}rowid_{index}"


def quoted(name: str) -> str:
    """A column's name as ``F.col`` takes it whole (a dot or a backtick in it kept)."""
    return "`" + name.replace("`", "``") + "`"
