"""Carry-over removal and update detection, batch and streaming, on a real server."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType
from spark_cdc import ChangelogSpec, post_process

from tests.support.feeds import SCHEMA, collect_rows, expect, feed, row, run_stream

ID = ChangelogSpec(row_id=["id"])
NO_CARRYOVERS = ChangelogSpec(row_id=["id"], contains_carryover_rows=False)
Run = Callable[..., tuple[list[tuple[Any, ...]], StructType]]


@pytest.fixture(params=["batch", "streaming"])
def run(request: pytest.FixtureRequest, spark: SparkSession, query_name: str) -> Run:
    """Post-process a feed in the parametrized mode; return (sorted rows, output schema)."""
    streaming = request.param == "streaming"

    def go(
        rows: Sequence[dict[str, Any]],
        spec: ChangelogSpec,
        options: dict[str, Any] | None = None,
        schema: str = SCHEMA,
    ) -> tuple[list[tuple[Any, ...]], StructType]:
        out = post_process(feed(spark, rows, schema=schema, streaming=streaming), spec, options)
        if streaming:
            schema_out = out.schema
            return collect_rows(run_stream(out, query_name)), schema_out
        return collect_rows(out), out.schema

    return go


CHANGES = [
    row(1, "a", "insert", 1),
    row(2, "b", "insert", 1),
    row(3, "c", "insert", 1),
    # v2 rewrites a file copy-on-write: 1 is carried over, 2 is updated, 3 is deleted.
    row(1, "a", "delete", 2),
    row(1, "a", "insert", 2),
    row(2, "b", "delete", 2),
    row(2, "B", "insert", 2),
    row(3, "c", "delete", 2),
    row(4, "d", "insert", 3),
]


WITHOUT_CARRYOVER = [r for r in CHANGES if not (r["id"] == 1 and r["_commit_version"] == 2)]
WITH_UPDATES = [
    row(1, "a", "insert", 1),
    row(2, "b", "insert", 1),
    row(3, "c", "insert", 1),
    row(2, "b", "update_preimage", 2),
    row(2, "B", "update_postimage", 2),
    row(3, "c", "delete", 2),
    row(4, "d", "insert", 3),
]


def test_carryover_removal_only(run: Run) -> None:
    rows, schema = run(CHANGES, ID, {"deduplicationMode": "dropCarryovers"})
    assert rows == expect(WITHOUT_CARRYOVER)
    assert schema == StructType.fromDDL(SCHEMA)


def test_update_detection_only(run: Run) -> None:
    rows, schema = run(WITHOUT_CARRYOVER, NO_CARRYOVERS, {"computeUpdates": True})
    assert rows == expect(WITH_UPDATES)
    assert schema == StructType.fromDDL(SCHEMA)


def test_carryover_removal_and_update_detection_fused(run: Run) -> None:
    rows, _ = run(CHANGES, ID, {"computeUpdates": "TRUE", "deduplicationMode": "DROPCARRYOVERS"})
    assert rows == expect(WITH_UPDATES)


def test_neither_pass_returns_the_feed_unchanged(run: Run) -> None:
    rows, schema = run(CHANGES, ID, {"deduplicationMode": "none"})
    assert rows == expect(CHANGES)
    assert schema == StructType.fromDDL(SCHEMA)


def test_passes_follow_the_changelog_capabilities(run: Run) -> None:
    """computeUpdates on a feed that writes updates natively runs nothing (Spark's rule)."""
    spec = ChangelogSpec(
        row_id=["id"], contains_carryover_rows=False, represents_update_as_delete_and_insert=False
    )
    rows, _ = run(CHANGES, spec, {"computeUpdates": True})
    assert rows == expect(CHANGES)


RV_SCHEMA = (
    "id int, v string, rv long, _change_type string, _commit_version long, "
    "_commit_timestamp timestamp"
)


def test_row_version_decides_carryovers_and_null_versions_never_match(run: Run) -> None:
    changes = [
        row(1, "a", "delete", 2, rv=7),
        row(1, "a", "insert", 2, rv=7),  # same row version: carry-over
        row(2, "b", "delete", 2, rv=7),
        row(2, "b", "insert", 2, rv=8),  # new row version, same data: an update
        row(3, "c", "delete", 2, rv=None),
        row(3, "c", "insert", 2, rv=None),  # NULL versions are not equal versions
        row(4, "d", "delete", 2, rv=5),
        row(4, "d", "insert", 2, rv=None),
    ]
    spec = ChangelogSpec(row_id=["id"], row_version="rv")
    rows, schema = run(changes, spec, {"computeUpdates": True}, schema=RV_SCHEMA)
    relabel = {"delete": "update_preimage", "insert": "update_postimage"}
    assert rows == expect(
        [{**r, "_change_type": relabel[r["_change_type"]]} for r in changes if r["id"] != 1],
        RV_SCHEMA,
    )
    assert schema == StructType.fromDDL(RV_SCHEMA)


def test_update_detection_needs_no_row_version(run: Run) -> None:
    """Spark 4.3 throws a bare UnsupportedOperationException here; we do not."""
    changes = [row(1, "a", "delete", 2, rv=None), row(1, "A", "insert", 2, rv=None)]
    spec = ChangelogSpec(row_id=["id"], row_version="rv", contains_carryover_rows=False)
    rows, _ = run(changes, spec, {"computeUpdates": True}, schema=RV_SCHEMA)
    assert rows == expect(
        [row(1, "a", "update_preimage", 2, rv=None), row(1, "A", "update_postimage", 2, rv=None)],
        RV_SCHEMA,
    )


COMPOSITE_SCHEMA = (
    "id int, name string, v string, _change_type string, _commit_version long, "
    "_commit_timestamp timestamp"
)


def test_composite_row_id_uses_every_column(run: Run) -> None:
    changes = [
        row(1, "x", "delete", 2, name="Alice"),
        row(1, "y", "insert", 2, name="Bob"),  # another composite id: not an update
        row(2, "x", "delete", 2, name="Carol"),
        row(2, "y", "insert", 2, name="Carol"),  # same composite id: an update
    ]
    spec = ChangelogSpec(row_id=["id", "name"], contains_carryover_rows=False)
    rows, _ = run(changes, spec, {"computeUpdates": True}, schema=COMPOSITE_SCHEMA)
    assert rows == expect(
        [
            *changes[:2],
            row(2, "x", "update_preimage", 2, name="Carol"),
            row(2, "y", "update_postimage", 2, name="Carol"),
        ],
        COMPOSITE_SCHEMA,
    )


NESTED_SCHEMA = (
    "id int, key struct<id: int, region: string>, v string, _change_type string, "
    "_commit_version long, _commit_timestamp timestamp"
)


def test_nested_row_id(run: Run) -> None:
    changes = [
        row(0, "a", "delete", 2, key={"id": 1, "region": "eu"}),
        row(0, "a", "insert", 2, key={"id": 1, "region": "eu"}),  # carry-over
        row(0, "b", "delete", 2, key={"id": 2, "region": "eu"}),
        row(0, "B", "insert", 2, key={"id": 2, "region": "eu"}),  # update of key.id 2
    ]
    spec = ChangelogSpec(row_id=["key.id"])
    rows, schema = run(changes, spec, {"computeUpdates": True}, schema=NESTED_SCHEMA)
    assert [(r[1]["id"], r[2], r[3]) for r in rows] == [
        (2, "B", "update_postimage"),
        (2, "b", "update_preimage"),
    ]
    assert schema == StructType.fromDDL(NESTED_SCHEMA)


WIDE_SCHEMA = (
    "id int, v string, s struct<a: int, b: array<string>>, tags array<int>, "
    "attrs map<string, struct<x: double>>, ts timestamp, bin binary, "
    "_change_type string, _commit_version long, _commit_timestamp timestamp"
)


def test_full_row_carryover_detection_with_nested_array_map_and_null_values(run: Run) -> None:
    from datetime import datetime, timezone

    ts = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
    base = {
        "s": {"a": 1, "b": ["x", None]},
        "tags": [1, None, 3],
        "attrs": {"k": {"x": 1.5}, "n": None},
        "ts": ts,
        "bin": b"\x00\x01",
    }

    def pair(id: int, before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
        return [row(id, "v", "delete", 2, **before), row(id, "v", "insert", 2, **after)]

    same = pair(1, base, base)
    all_null = pair(2, {k: None for k in base}, {k: None for k in base})
    nested_changed = pair(3, base, {**base, "s": {"a": 1, "b": ["x", "y"]}})
    map_changed = pair(4, base, {**base, "attrs": {"k": {"x": 2.5}, "n": None}})
    null_vs_value = pair(5, base, {**base, "tags": None})
    micros_changed = pair(6, base, {**base, "ts": ts.replace(microsecond=123457)})
    string_null_vs_text = pair(7, {**base, "s": {"a": None, "b": None}}, {**base, "s": None})
    changes = (
        same
        + all_null
        + nested_changed
        + map_changed
        + null_vs_value
        + micros_changed
        + string_null_vs_text
    )
    rows, schema = run(changes, ID, {}, schema=WIDE_SCHEMA)
    assert sorted({r[0] for r in rows}) == [3, 4, 5, 6, 7]
    assert rows == expect([r for r in changes if r["id"] >= 3], WIDE_SCHEMA)
    assert schema == StructType.fromDDL(WIDE_SCHEMA)


def test_duplicate_changes_pass_when_only_carryover_removal_runs(run: Run) -> None:
    """Spark lets them through silently when no pass relabels; so do we."""
    changes = [row(1, "a", "insert", 1), row(1, "b", "insert", 1)]
    rows, _ = run(changes, ID, {})
    assert rows == expect(changes)


def test_range_options_filter_before_post_processing(run: Run) -> None:
    in_v2 = [r for r in WITHOUT_CARRYOVER if r["_commit_version"] == 2]
    rows, _ = run(CHANGES, ID, {"startingVersion": 2, "endingVersion": "2"})
    assert rows == expect(in_v2)
    rows, _ = run(CHANGES, ID, {"startingVersion": "1", "startingBoundInclusive": "false"})
    assert rows == expect([r for r in WITHOUT_CARRYOVER if r["_commit_version"] > 1])
    rows, _ = run(
        CHANGES,
        ID,
        {
            "startingTimestamp": "2024-01-01 00:00:02Z",
            "endingTimestamp": "2024-01-01T00:00:03+00:00",
            "endingBoundInclusive": False,
        },
    )
    assert rows == expect(in_v2)
