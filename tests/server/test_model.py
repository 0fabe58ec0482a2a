"""Random change feeds, checked against a small pure-Python model of the semantics."""

from __future__ import annotations

import math
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType
from spark_cdc import ChangelogReader, ChangelogSpec, post_process

from tests.support.feeds import (
    as_tuples,
    by_commit,
    collect_rows,
    feed,
    model_net_changes,
    model_post_process,
    model_streaming_net_changes,
    row,
    run_stream,
)

SCHEMA = (
    "id int, v string, rv long, _change_type string, _commit_version long, "
    "_commit_timestamp timestamp"
)
VALUES = st.sampled_from(["a", "b", None])
ROW_VERSIONS = st.sampled_from([1, 2, None])


@st.composite
def changelogs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Per commit and row id: nothing, an insert, a delete, or a delete+insert pair (an
    update or a carry-over, depending on the drawn values); sometimes native update rows,
    and now and then a group no contract allows: two inserts (refused under update
    detection), or a pair beside a native update row (which the passes count apart)."""
    rows: list[dict[str, Any]] = []
    for version in range(1, draw(st.integers(1, 4)) + 1):
        for id in range(draw(st.integers(1, 4))):
            kinds = ["none", "insert", "delete", "pair", "pair", "native", "twice", "mixed"]
            kind = draw(st.sampled_from(kinds))
            before = {"v": draw(VALUES), "rv": draw(ROW_VERSIONS)}
            after = draw(st.sampled_from([before, {"v": draw(VALUES), "rv": draw(ROW_VERSIONS)}]))
            if kind == "insert":
                rows.append(row(id, after["v"], "insert", version, rv=after["rv"]))
            elif kind == "delete":
                rows.append(row(id, before["v"], "delete", version, rv=before["rv"]))
            elif kind == "pair":
                rows.append(row(id, before["v"], "delete", version, rv=before["rv"]))
                rows.append(row(id, after["v"], "insert", version, rv=after["rv"]))
            elif kind == "native":
                rows.append(row(id, before["v"], "update_preimage", version, rv=before["rv"]))
                rows.append(row(id, after["v"], "update_postimage", version, rv=after["rv"]))
            elif kind == "twice":  # alike, as net changes may keep either
                rows.append(row(id, after["v"], "insert", version, rv=after["rv"]))
                rows.append(row(id, after["v"], "insert", version, rv=after["rv"]))
            elif kind == "mixed":
                rows.append(row(id, before["v"], "delete", version, rv=before["rv"]))
                rows.append(row(id, after["v"], "insert", version, rv=after["rv"]))
                rows.append(row(id, after["v"], "update_postimage", version, rv=after["rv"]))
    return rows


SPECS = st.builds(
    ChangelogSpec,
    row_id=st.just(["id"]),
    row_version=st.sampled_from(["rv", None]),
    contains_carryover_rows=st.booleans(),
    represents_update_as_delete_and_insert=st.booleans(),
    contains_intermediate_changes=st.booleans(),
)
OPTIONS = st.fixed_dictionaries(
    {
        "deduplicationMode": st.sampled_from(["none", "dropCarryovers", "netChanges"]),
        "computeUpdates": st.booleans(),
    }
)


def _expected(
    rows: list[dict[str, Any]], spec: ChangelogSpec, options: dict[str, Any], streaming: bool
) -> Any:
    dedupe = options["deduplicationMode"] != "none"
    updates = options["computeUpdates"] and spec.represents_update_as_delete_and_insert
    if updates and spec.contains_carryover_rows and not dedupe:
        return None  # refused: UPDATE_DETECTION_REQUIRES_CARRY_OVER_REMOVAL
    net = options["deduplicationMode"] == "netChanges" and spec.contains_intermediate_changes

    def row_level(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return model_post_process(
            changes,
            spec.row_id,
            row_version=spec.row_version,
            carryover_removal=dedupe and spec.contains_carryover_rows,
            update_detection=updates,
        )

    if net and streaming:  # one commit per micro-batch, as ``feed`` serves them
        batches = [row_level(commit) for commit in by_commit(rows)]
        kept = model_streaming_net_changes(
            batches, spec.row_id, compute_updates=options["computeUpdates"]
        )
    elif net:
        kept = model_net_changes(
            row_level(rows), spec.row_id, compute_updates=options["computeUpdates"]
        )
    else:
        kept = row_level(rows)
    return as_tuples(kept, StructType.fromDDL(SCHEMA))


def _check(spark: SparkSession, rows: Any, spec: Any, options: Any, streaming: str | None) -> None:
    try:
        expected = _expected(rows, spec, options, streaming=bool(streaming))
    except ValueError as refused:  # the model's contract violation: the query must fail so
        out = post_process(
            feed(spark, rows, schema=SCHEMA, streaming=bool(streaming)), spec, options
        )
        with pytest.raises(Exception, match=str(refused)):
            collect_rows(run_stream(out, streaming) if streaming else out)
        return
    if expected is None:
        with pytest.raises(Exception, match="UPDATE_DETECTION_REQUIRES_CARRY_OVER_REMOVAL"):
            post_process(feed(spark, rows, schema=SCHEMA), spec, options)
        return
    out = post_process(feed(spark, rows, schema=SCHEMA, streaming=bool(streaming)), spec, options)
    got = collect_rows(run_stream(out, streaming) if streaming else out)
    assert got == expected


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=changelogs(), spec=SPECS, options=OPTIONS)
def test_batch_matches_the_model(spark: SparkSession, rows: Any, spec: Any, options: Any) -> None:
    _check(spark, rows, spec, options, None)


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=changelogs(), spec=SPECS, options=OPTIONS)
def test_streaming_matches_the_model(
    spark: SparkSession, rows: Any, spec: Any, options: Any
) -> None:
    _check(spark, rows, spec, options, f"model_{uuid.uuid4().hex[:10]}")


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=changelogs(), spec=SPECS, compute_updates=st.booleans())
def test_streaming_net_changes_match_the_model(
    spark: SparkSession, rows: Any, spec: Any, compute_updates: bool
) -> None:
    options = {"deduplicationMode": "netChanges", "computeUpdates": compute_updates}
    _check(spark, rows, spec, options, f"net_{uuid.uuid4().hex[:10]}")


# -- the same model through delta_changelog: the source resolving the passes, and the client
# plan, on Delta tables whose raw feed is the random changelog (tests/delta_changelogs.py).

DELTA_VALUES = {
    "v": st.sampled_from(["a", "b", None]),
    "d": st.sampled_from([0.0, -0.0, math.nan, None]),
}


@st.composite
def delta_changelogs(draw: st.DrawFn) -> list[list[dict[str, Any]]]:
    """Commits of rows (id, v, d): per id nothing, an insert, a delete, a delete+insert pair
    (a carry-over or an update), native update rows (a change data file), or now and then
    two inserts (a contract violation under update detection)."""
    commits = []
    for version in range(1, draw(st.integers(1, 4)) + 1):
        rows: list[dict[str, Any]] = []
        for id in range(draw(st.integers(1, 4))):
            kind = draw(
                st.sampled_from(["none", "insert", "delete", "pair", "pair", "native", "twice"])
            )
            before = {name: draw(values) for name, values in DELTA_VALUES.items()}
            after = draw(st.sampled_from([before, {**before, "d": draw(DELTA_VALUES["d"])}]))
            kinds = {
                "none": [],
                "insert": [("insert", after)],
                "delete": [("delete", before)],
                "pair": [("delete", before), ("insert", after)],
                "native": [("update_preimage", before), ("update_postimage", after)],
                "twice": [("insert", before), ("insert", after)],
            }[kind]
            rows += [row(id, image["v"], change, version, d=image["d"]) for change, image in kinds]
        commits.append(rows)
    return commits


def _floats_spelt(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """NaN never equals itself and -0.0 equals 0.0 in Python: compare floats by spelling."""
    return sorted(
        (tuple(repr(v) if isinstance(v, float) else v for v in r) for r in rows), key=repr
    )


def _check_delta(
    spark: SparkSession, tmp_path: Path, commits: Any, options: dict[str, Any], query: str | None
) -> None:
    from tests.support.delta_changelogs import SCHEMA_DDL, write_changelog

    path = str(tmp_path / uuid.uuid4().hex)
    write_changelog(path, commits)
    rows = [r for c in commits for r in c]
    row_id = ["id"] if "rowId" in options else None
    dedupe = options.get("deduplicationMode", "dropCarryovers") != "none"
    updates = bool(options.get("computeUpdates"))
    try:
        kept = model_post_process(
            rows, row_id, row_version=None, carryover_removal=dedupe, update_detection=updates
        )
        if options.get("deduplicationMode") == "netChanges":
            kept = model_net_changes(kept, ["id"], compute_updates=updates)
        expected: Any = _floats_spelt(as_tuples(kept, StructType.fromDDL(SCHEMA_DDL)))
    except ValueError:
        expected = "UNEXPECTED_MULTIPLE_CHANGES_PER_ROW_VERSION"
    for where in ("source", "client") if query is None else ("source",):
        reader = ChangelogReader(spark, streaming=query is not None)
        df = reader.options(startingVersion=1, postProcessing=where, **options).changes(path)
        try:
            got: Any = _floats_spelt(collect_rows(run_stream(df, query) if query else df))
        except Exception as error:  # the contract violation, as the client reports it
            condition = error.getCondition() if hasattr(error, "getCondition") else None
            got = str(condition or error).removeprefix("CHANGELOG_CONTRACT_VIOLATION.")
        assert got == expected, where


DELTA_OPTIONS = st.sampled_from(
    [
        {},
        {"rowId": "id"},
        {"rowId": "id", "computeUpdates": True},
        {"rowId": "id", "deduplicationMode": "netChanges", "computeUpdates": True},
        {"rowId": "id", "deduplicationMode": "netChanges"},
    ]
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(commits=delta_changelogs(), options=DELTA_OPTIONS)
def test_delta_source_and_client_paths_match_the_model(
    spark: SparkSession, tmp_path: Path, commits: Any, options: dict[str, Any]
) -> None:
    _check_delta(spark, tmp_path, commits, options, None)


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    commits=delta_changelogs(), options=DELTA_OPTIONS.filter(lambda o: "deduplicationMode" not in o)
)
def test_delta_source_path_streams_match_the_model(
    spark: SparkSession, tmp_path: Path, commits: Any, options: dict[str, Any]
) -> None:
    _check_delta(spark, tmp_path, commits, options, f"delta_model_{uuid.uuid4().hex[:10]}")


# -- the same model through iceberg_changelog: random table histories written by pyiceberg, each
# snapshot a copy-on-write rewrite of the whole table, so the raw feed of a snapshot is every
# row before it deleted and every row after it inserted: carry-overs for the rows it kept,
# delete+insert pairs for those it changed.

ICEBERG_STATES = st.lists(
    st.dictionaries(st.integers(0, 4), st.fixed_dictionaries(DELTA_VALUES), max_size=4),
    min_size=1,
    max_size=4,
)


def _check_iceberg(
    spark: SparkSession, tmp_path: Path, states: list[dict[int, dict[str, Any]]], options: Any
) -> None:
    import pyarrow as pa

    from tests.support.iceberg_tables import rewrite, sql_catalog, table_folder

    folder = tmp_path / uuid.uuid4().hex
    folder.mkdir()
    catalog = sql_catalog(folder)
    catalog.create_namespace("db")
    schema = pa.schema([("id", pa.int32()), ("v", pa.string()), ("d", pa.float64())])
    table = catalog.create_table("db.t", schema)
    rows: list[dict[str, Any]] = []
    before: dict[int, dict[str, Any]] = {}
    for version, state in enumerate(states, start=1):
        data = [{"id": k, **image} for k, image in sorted(state.items())]
        rewrite(table, pa.Table.from_pylist(data, schema=schema))
        rows += [row(k, image["v"], "delete", version, d=image["d"]) for k, image in before.items()]
        rows += [row(k, image["v"], "insert", version, d=image["d"]) for k, image in state.items()]
        before = state
    updates = bool(options.get("computeUpdates"))
    kept = model_post_process(
        rows,
        ["id"] if "rowId" in options else None,
        row_version=None,
        carryover_removal=True,
        update_detection=updates,
    )
    if options.get("deduplicationMode") == "netChanges":
        kept = model_net_changes(kept, ["id"], compute_updates=updates)
    expected = _floats_spelt(
        [(r["id"], r["v"], r["d"], r["_change_type"], r["_commit_version"]) for r in kept]
    )
    for where in ("source", "client"):
        reader = ChangelogReader(spark).format("iceberg")
        df = reader.options(startingVersion=1, postProcessing=where, **options)
        got = df.load(table_folder(table)).select("id", "v", "d", "_change_type", "_commit_version")
        assert _floats_spelt(collect_rows(got)) == expected, where


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(states=ICEBERG_STATES, options=DELTA_OPTIONS)
def test_iceberg_source_and_client_paths_match_the_model(
    spark: SparkSession, tmp_path: Path, states: Any, options: dict[str, Any]
) -> None:
    _check_iceberg(spark, tmp_path, states, options)
