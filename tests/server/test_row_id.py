"""The empty row id (``row_id=[]``, Spark's "declares none") against every capability and
option combination, batch and streaming, beside our ``row_id=None`` (whole-row identity).

Spark 4.3 (``ChangelogTable.validateSchema``) refuses an empty row id with
``INVALID_CHANGELOG_SCHEMA.MISSING_ROW_ID`` whenever the changelog declares any of
``containsCarryoverRows``, ``representsUpdateAsDeleteAndInsert`` or
``containsIntermediateChanges``, whatever the options; with none of them it returns the rows
as they are.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from spark_cdc import ChangelogSpec, post_process

from tests.support.feeds import collect_rows, expect, feed, row, run_stream

FLAGS = (
    "contains_carryover_rows",
    "represents_update_as_delete_and_insert",
    "contains_intermediate_changes",
)
OPTION_SETS: list[dict[str, Any]] = [
    {"deduplicationMode": mode, "computeUpdates": updates}
    for mode, updates in itertools.product(["none", "dropCarryovers", "netChanges"], [False, True])
]
# Every shape a pass could act on: a carry-over pair, an update pair, intermediate changes.
CHANGES = [
    row(1, "a", "insert", 1),
    row(2, "b", "insert", 1),
    row(1, "a", "delete", 2),
    row(1, "a", "insert", 2),
    row(2, "b", "delete", 2),
    row(2, "B", "insert", 2),
    row(2, "B", "delete", 3),
    row(3, "c", "insert", 3),
]


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
def test_an_empty_row_id_without_flags_passes_rows_through_under_every_option(
    spark: SparkSession, query_name: str, streaming: bool
) -> None:
    spec = ChangelogSpec(row_id=[], **dict.fromkeys(FLAGS, False))
    for index, options in enumerate(OPTION_SETS):
        raw = feed(spark, CHANGES, streaming=streaming)
        out = post_process(raw, spec, options)
        assert out.schema == raw.schema, options
        if streaming:
            got = collect_rows(run_stream(out, f"{query_name}_{index}"))
        else:
            got = collect_rows(out)
        assert got == expect(CHANGES), options


def test_an_empty_row_id_still_applies_the_range_options(spark: SparkSession) -> None:
    spec = ChangelogSpec(row_id=[], **dict.fromkeys(FLAGS, False))
    options = {"startingVersion": 2, "endingVersion": 2}
    out = post_process(feed(spark, CHANGES), spec, options)
    assert collect_rows(out) == expect([r for r in CHANGES if r["_commit_version"] == 2])


@pytest.mark.plan_only
def test_invalid_options_are_still_refused_with_an_empty_row_id(spark: SparkSession) -> None:
    spec = ChangelogSpec(row_id=[], **dict.fromkeys(FLAGS, False))
    with pytest.raises(AnalysisException) as caught:
        post_process(feed(spark, CHANGES), spec, {"deduplicationMode": "latest"})
    assert caught.value.getCondition() == "INVALID_CDC_OPTION.INVALID_DEDUPLICATION_MODE"


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
def test_no_row_id_identifies_rows_by_content(
    spark: SparkSession, query_name: str, streaming: bool
) -> None:
    """``row_id=None``, our extension: carry-overs are found; updates and net changes,
    which need a row id, are refused when asked for."""
    spec = ChangelogSpec(row_id=None)
    out = post_process(feed(spark, CHANGES, streaming=streaming), spec)
    got = collect_rows(run_stream(out, query_name)) if streaming else collect_rows(out)
    carried = [r for r in CHANGES if not (r["id"] == 1 and r["_commit_version"] == 2)]
    assert got == expect(carried)
    for options in ({"computeUpdates": True}, {"deduplicationMode": "netChanges"}):
        with pytest.raises(AnalysisException) as caught:
            post_process(feed(spark, CHANGES, streaming=streaming), spec, options)
        assert caught.value.getCondition() == "INVALID_CHANGELOG_SCHEMA.MISSING_ROW_ID"
        assert "rowId" in str(caught.value)
