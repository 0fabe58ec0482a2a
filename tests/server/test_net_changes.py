"""Net changes, batch and streaming, against Spark 4.3's semantics."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType
from spark_cdc import ChangelogSpec, post_process
from spark_cdc.stream_guard import STATE_STORE_PROVIDER

from tests.support.feeds import (
    SCHEMA,
    collect_rows,
    drain,
    expect,
    feed,
    model_net,
    row,
    run_stream,
)

# A changelog that writes updates as pre/post images and has no carry-overs: only the net
# changes pass runs.
NET_ONLY = ChangelogSpec(
    row_id=["id"], contains_carryover_rows=False, represents_update_as_delete_and_insert=False
)
PRE = ("delete", "update_preimage")
POST = ("insert", "update_postimage")


def _net(compute_updates: bool) -> dict[str, Any]:
    return {"deduplicationMode": "netChanges", "computeUpdates": compute_updates}


def _both(
    spark: SparkSession,
    changes: list[dict],
    spec: ChangelogSpec,
    options: dict,
    query_name: str,
    schema: str = SCHEMA,
) -> tuple[list, list]:
    batch = collect_rows(post_process(feed(spark, changes, schema=schema), spec, options))
    stream = post_process(feed(spark, changes, schema=schema, streaming=True), spec, options)
    return batch, collect_rows(run_stream(stream, query_name))


# (first event, last event) -> Spark's matrix, as the reference model writes it out.
COMBINATIONS = list(itertools.product(PRE + POST, repeat=2))


@pytest.mark.parametrize("compute_updates", [False, True])
def test_every_first_and_last_event_combination(
    spark: SparkSession, query_name: str, compute_updates: bool
) -> None:
    """Row id i's first event is at version 1, its last at version 3; commits 1-3 touch
    every id, so the stream nets each id's three events together as batch does."""
    changes, expected = [], []
    for i, (first_type, last_type) in enumerate(COMBINATIONS):
        first = row(i, f"first{i}", first_type, 1)
        middle_type = "insert" if first_type in PRE else "delete"
        last = row(i, f"last{i}", last_type, 3)
        changes += [first, row(i, f"mid{i}", middle_type, 2), last]
        expected += model_net(first, last, compute_updates)
    batch, stream = _both(spark, changes, NET_ONLY, _net(compute_updates), query_name)
    assert batch == expect(expected)
    assert stream == batch


def test_insert_then_delete_cancels_and_updates_collapse(
    spark: SparkSession, query_name: str
) -> None:
    changes = [
        row(1, "a", "insert", 1),
        row(1, "a", "delete", 4),  # apart: the stream emits both
        row(5, "e", "insert", 3),
        row(5, "e", "delete", 4),  # consecutive: cancels anyway
        row(2, "a", "update_preimage", 1),
        row(2, "b", "update_postimage", 1),
        row(2, "b", "update_preimage", 2),
        row(2, "c", "update_postimage", 2),
        row(2, "c", "update_preimage", 3),
        row(2, "d", "update_postimage", 3),
        row(3, "x", "insert", 2),
        row(3, "x", "update_preimage", 3),
        row(3, "y", "update_postimage", 3),
        row(3, "y", "update_preimage", 4),
        row(3, "z", "update_postimage", 4),
        row(4, "p", "update_preimage", 1),
        row(4, "q", "update_postimage", 1),
        row(4, "q", "delete", 2),
    ]
    batch, stream = _both(spark, changes, NET_ONLY, _net(True), query_name)
    expected = [
        row(2, "a", "update_preimage", 1),
        row(2, "d", "update_postimage", 3),
        row(3, "z", "insert", 4),
        row(4, "p", "delete", 1),
    ]
    assert batch == expect(expected)
    assert stream == expect([*expected, row(1, "a", "insert", 1), row(1, "a", "delete", 4)])


def test_composite_row_id(spark: SparkSession, query_name: str) -> None:
    schema = (
        "id int, k string, v string, _change_type string, _commit_version long, "
        "_commit_timestamp timestamp"
    )
    spec = ChangelogSpec(
        row_id=["id", "k"],
        contains_carryover_rows=False,
        represents_update_as_delete_and_insert=False,
    )
    changes = [
        row(1, "a", "insert", 1, k="x"),
        row(1, "a", "insert", 1, k="y"),
        row(1, "a", "update_preimage", 2, k="x"),
        row(1, "b", "update_postimage", 2, k="x"),
        row(1, "a", "delete", 2, k="y"),
    ]
    batch, stream = _both(spark, changes, spec, _net(True), query_name, schema)
    assert batch == expect([row(1, "b", "insert", 2, k="x")], schema)
    assert stream == batch


def _merge_history() -> list[dict]:
    """Copy-on-write commits: updates as delete+insert, untouched rows carried over."""
    return [
        row(1, "a", "insert", 1),
        row(2, "b", "insert", 1),
        row(3, "c", "insert", 1),
        # v2: update 1, carry 2 over
        row(1, "a", "delete", 2),
        row(1, "a2", "insert", 2),
        row(2, "b", "delete", 2),
        row(2, "b", "insert", 2),
        # v3: update 1 again, delete 3, carry 2 over
        row(1, "a2", "delete", 3),
        row(1, "a3", "insert", 3),
        row(3, "c", "delete", 3),
        row(2, "b", "delete", 3),
        row(2, "b", "insert", 3),
    ]


@pytest.mark.parametrize("compute_updates", [False, True])
def test_with_carry_over_removal_and_update_detection(
    spark: SparkSession, query_name: str, compute_updates: bool
) -> None:
    """The combination Spark 4.3 fails at start (INTERNAL_ERROR) works here."""
    spec = ChangelogSpec(row_id=["id"])
    batch, stream = _both(spark, _merge_history(), spec, _net(compute_updates), query_name)
    # id 2's carry-overs are no changes; id 3 was inserted at v1 and deleted at v3
    assert batch == expect([row(1, "a3", "insert", 3), row(2, "b", "insert", 1)])
    # the stream releases ids 2 and 3 at v2 (carry-overs do not touch an id); id 3's delete
    # then opens a new window
    assert stream == expect(
        [
            row(1, "a3", "insert", 3),
            row(2, "b", "insert", 1),
            row(3, "c", "insert", 1),
            row(3, "c", "delete", 3),
        ],
    )


def test_a_range_of_versions_is_netted_as_a_whole_in_batch(spark: SparkSession) -> None:
    spec = ChangelogSpec(row_id=["id"])
    options = {**_net(True), "startingVersion": 2, "endingVersion": 3}
    out = collect_rows(post_process(feed(spark, _merge_history()), spec, options))
    assert out == expect(
        [
            row(1, "a", "update_preimage", 2),
            row(1, "a3", "update_postimage", 3),
            row(3, "c", "delete", 3),
        ],
    )


def test_the_mode_enum_is_an_option_value(spark: SparkSession, tmp_path: Path) -> None:
    """``DeduplicationMode.NET_CHANGES`` reads as 'netChanges' (its str() was the member's
    name, refused as a mode), through post_process and ChangelogReader alike."""
    from deltalake import DeltaTable, write_deltalake
    from spark_cdc import ChangelogReader, DeduplicationMode

    from tests.support.delta_tables import rows

    by_enum = {"deduplicationMode": DeduplicationMode.NET_CHANGES, "computeUpdates": True}
    by_name = {"deduplicationMode": "netChanges", "computeUpdates": True}
    spec = ChangelogSpec(row_id=["id"])
    history = feed(spark, _merge_history())
    assert collect_rows(post_process(history, spec, by_enum)) == collect_rows(
        post_process(history, spec, by_name)
    )
    path = str(tmp_path / "t")
    write_deltalake(path, rows(range(3)))
    DeltaTable(path).update({"amount": "-1.0"}, predicate="id = 1")
    reads = [
        ChangelogReader(spark).options(rowId="id", startingVersion=0, **options).changes(path)
        for options in (by_enum, by_name)
    ]
    assert reads[0].schema == reads[1].schema
    assert sorted(reads[0].collect()) == sorted(reads[1].collect())
    assert len(reads[0].collect()) == 3  # inserts of 0 and 2, the net insert of 1


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
def test_unknown_change_type_fails(spark: SparkSession, query_name: str, streaming: bool) -> None:
    changes = [row(1, "a", "insert", 1), row(1, "a", "upsert", 2)]
    out = post_process(feed(spark, changes, streaming=streaming), NET_ONLY, _net(True))
    with pytest.raises(Exception, match=r"CHANGELOG_CONTRACT_VIOLATION\.UNEXPECTED_CHANGE_TYPE"):
        run_stream(out, query_name) if streaming else out.collect()


def test_two_inserts_for_one_row_id_in_a_commit_fail_with_update_detection(
    spark: SparkSession, query_name: str
) -> None:
    changes = [row(1, "a", "insert", 1), row(1, "b", "insert", 1), row(1, "a", "delete", 1)]
    out = post_process(
        feed(spark, changes, streaming=True), ChangelogSpec(row_id=["id"]), _net(True)
    )
    with pytest.raises(Exception, match="UNEXPECTED_MULTIPLE_CHANGES_PER_ROW_VERSION"):
        run_stream(out, query_name)


def test_streaming_emits_again_for_an_id_touched_after_its_emission(
    spark: SparkSession, query_name: str
) -> None:
    """Spark's documented example: id 1 inserted at v1 and deleted at v3, an unrelated
    commit between. Batch over v1..v3 emits nothing for id 1; the stream has emitted the
    insert before the delete arrives, and cannot take it back."""
    changes = [row(1, "a", "insert", 1), row(2, "b", "insert", 2), row(1, "a", "delete", 3)]
    batch, stream = _both(spark, changes, NET_ONLY, _net(True), query_name)
    assert batch == expect([row(2, "b", "insert", 2)])
    assert stream == expect(
        [row(1, "a", "insert", 1), row(2, "b", "insert", 2), row(1, "a", "delete", 3)]
    )


def test_stream_keeps_no_state_for_emitted_ids(spark: SparkSession, query_name: str) -> None:
    changes = [row(i, "a", "insert", 1) for i in range(50)]
    changes += [row(i, "a", "delete", 2) for i in range(25)]
    stream = post_process(feed(spark, changes, streaming=True), NET_ONLY, _net(True))
    progress = drain(stream, query_name)
    assert [op["numRowsTotal"] for op in progress[-1]["stateOperators"]] == [0]
    dropped = [op["numRowsDroppedByWatermark"] for p in progress for op in p["stateOperators"]]
    assert dropped and not any(dropped)
    assert len(spark.table(query_name).collect()) == 25


def test_default_state_store_suffices_and_session_is_left_as_it_was(
    spark: SparkSession, query_name: str
) -> None:
    before = spark.conf.get(STATE_STORE_PROVIDER, None)
    changes = [row(1, "a", "insert", 1), row(1, "b", "insert", 2)]
    stream = post_process(feed(spark, changes, streaming=True), NET_ONLY, _net(True))
    assert collect_rows(run_stream(stream, query_name)) == expect([row(1, "b", "insert", 2)])
    assert spark.conf.get(STATE_STORE_PROVIDER, None) == before


def test_restart_from_checkpoint_keeps_exactly_once(spark: SparkSession, tmp_path: Path) -> None:
    """Stop after 3 of 6 commits with ids still buffered, restart on all 6: the sink holds
    exactly what one uninterrupted run writes."""
    changes = [
        row(1, "a", "insert", 1),
        row(2, "b", "insert", 1),
        row(1, "a", "update_preimage", 2),
        row(1, "b", "update_postimage", 2),
        row(3, "c", "insert", 3),
        row(2, "b", "delete", 3),
        row(1, "b", "update_preimage", 4),
        row(1, "c", "update_postimage", 4),
        row(4, "d", "insert", 5),
        row(3, "c", "delete", 6),
    ]
    first_half = [r for r in changes if r["_commit_version"] <= 3]

    def run(rows: list[dict], name: str) -> None:
        stream = post_process(feed(spark, rows, streaming=True), NET_ONLY, _net(True))
        query = (
            stream.writeStream.format("parquet")
            .option("path", str(tmp_path / name / "out"))
            .option("checkpointLocation", str(tmp_path / name / "checkpoint"))
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    run(changes, "once")
    run(first_half, "restarted")
    run(changes, "restarted")
    once = collect_rows(spark.read.parquet(str(tmp_path / "once" / "out")))
    restarted = collect_rows(spark.read.parquet(str(tmp_path / "restarted" / "out")))
    assert restarted == once
    assert len(once) == len(set(once)) > 0


def test_output_schema_is_the_input_schema_without_watermark_metadata(
    spark: SparkSession,
) -> None:
    source = feed(spark, [row(1, "a", "insert", 1)], streaming=True)
    out = post_process(source, NET_ONLY, _net(True))
    assert out.schema == source.schema
    assert all(not f.metadata for f in out.schema.fields)


def test_update_output_mode_is_refused(spark: SparkSession, query_name: str) -> None:
    out = post_process(
        feed(spark, [row(1, "a", "insert", 1)], streaming=True), NET_ONLY, _net(True)
    )
    with pytest.raises(AnalysisException) as caught:
        out.writeStream.format("memory").queryName(query_name).outputMode("update").start()
    assert caught.value.getCondition() == "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION"


def test_non_string_map_keys_are_refused_with_the_column_named(spark: SparkSession) -> None:
    schema = (
        "id int, m map<int,string>, _change_type string, _commit_version long, "
        "_commit_timestamp timestamp"
    )
    source = feed(spark, [row(1, None, "insert", 1, m={1: "x"})], schema=schema, streaming=True)
    out = post_process(source, NET_ONLY, _net(True))
    with pytest.raises(AnalysisException) as caught:
        out.schema  # noqa: B018 - the first look at the plan resolves it
    assert caught.value.getCondition() == "UNSUPPORTED_FEATURE.CDC_NET_CHANGES_MAP_KEY"
    assert "'m'" in str(caught.value)


def _many_ids_changelog(ids: int, commits: int) -> list[dict[str, Any]]:
    """Every kind of change, drawn per (id, commit) with a fixed seed: at most one delete
    and one insert per id and commit, so update detection never refuses it."""
    import random

    draw = random.Random(18)
    changes = []
    for version in range(1, commits + 1):
        for i in range(ids):
            kind = draw.choice(["none", "none", "insert", "delete", "update", "carry", "native"])
            old, new = f"v{i}", f"v{i}_{version}"
            if kind == "insert":
                changes.append(row(i, new, "insert", version))
            elif kind == "delete":
                changes.append(row(i, old, "delete", version))
            elif kind in ("update", "carry"):
                changes.append(row(i, old, "delete", version))
                changes.append(row(i, new if kind == "update" else old, "insert", version))
            elif kind == "native":
                changes.append(row(i, old, "update_preimage", version))
                changes.append(row(i, new, "update_postimage", version))
    return changes


def test_many_ids_over_every_bucket_and_micro_batch_match_the_model(
    spark: SparkSession, query_name: str
) -> None:
    """600 ids (every bucket holds several), 8 commits read two per micro-batch, carry-over
    removal and update detection folded in: the stream's whole output is the model's."""
    from tests.support.feeds import by_commit, model_post_process, model_streaming_net_changes

    changes = _many_ids_changelog(600, 8)
    spec = ChangelogSpec(row_id=["id"])  # carry-overs, updates as delete+insert
    stream = post_process(
        feed(spark, changes, streaming=True, commits_per_batch=2), spec, _net(True)
    )
    commits = [
        model_post_process(
            c, ["id"], row_version=None, carryover_removal=True, update_detection=True
        )
        for c in by_commit(changes)
    ]
    micro_batches = [commits[i] + commits[i + 1] for i in range(0, len(commits), 2)]
    expected = model_streaming_net_changes(micro_batches, ["id"], compute_updates=True)
    got = run_stream(stream, query_name)
    assert collect_rows(got) == expect(expected)
    assert got.schema == StructType.fromDDL(SCHEMA)


TYPED_SCHEMA = (
    "id double, v string, n long, d double, f float, ts timestamp, bin binary, "
    "s struct<a: int, b: array<string>>, m map<string, double>, "
    "_change_type string, _commit_version long, _commit_timestamp timestamp"
)


def test_values_come_back_exactly_and_negative_zero_is_one_row_id(
    spark: SparkSession, query_name: str
) -> None:
    """Rows cross the operator as JSON text: every value returns as it went in (a long
    past 2^53, -0.0, microseconds, bytes, nested and map values, non-ASCII text). And
    -0.0 and 0.0 are one row id, as Spark groups them: inserted, then deleted, nothing."""
    import math
    from datetime import datetime, timezone

    ts = datetime(2024, 5, 1, 12, 0, 0, 123457, tzinfo=timezone.utc)
    odd = {
        "n": 2**62 + 1,
        "d": -0.0,
        "f": 1.5,
        "ts": ts,
        "bin": b"\x00\x01z",
        "s": {"a": None, "b": ["x", None]},
        "m": {"k": 1e300, "n": None},
    }
    plain = {k: None for k in odd}
    changes = [
        row(-0.0, "a", "insert", 1, **plain),
        row(0.0, "a", "delete", 2, **plain),
        row(1.5, "ü😀", "update_preimage", 1, **plain),
        row(1.5, "b", "update_postimage", 1, **odd),
    ]
    batch, stream = _both(spark, changes, NET_ONLY, _net(True), query_name, TYPED_SCHEMA)
    assert batch == expect(changes[2:], TYPED_SCHEMA)
    assert stream == batch
    postimage = next(r for r in stream if r[-3] == "update_postimage")
    assert math.copysign(1.0, postimage[3]) == -1.0  # -0.0 kept its sign
