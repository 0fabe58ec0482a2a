"""Target commits written by this package (``sinks.apply.direct_commits``), on real Delta
tables: a new target has no deletion vectors unless its properties turn them on, and opens
in deltalake's everyday reads; a later batch rewrites only the files holding its keys (or,
with deletion vectors, no file); a commit lost to another writer is made again on the new
snapshot; and what this path cannot keep goes to delta-rs' MERGE. The model tests
(test_apply_model.py) check the rows of every path."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

import polars
import pyarrow as pa
import pytest
from deltalake import DeltaTable, WriterProperties, write_deltalake
from spark_cdc.server_plugin.delta import committer
from spark_cdc.server_plugin.errors import ChangelogSourceError
from spark_cdc.server_plugin.sinks.apply.delta import direct_commits
from spark_cdc.server_plugin.sinks.apply.engine.columns import aligned
from spark_cdc.server_plugin.sinks.apply.engine.spec import END_AT, START_AT
from spark_cdc.server_plugin.sinks.apply.task import apply_batch

from tests.support import duckdb_tables
from tests.support.apply_model import Change
from tests.support.apply_targets import (
    applied_in_tasks,
    prepared,
    read_table,
    sorted_rows,
    spec_for,
)

FIRST = [Change((k,), (1,), "upsert", {"a": k, "b": "x"}) for k in range(1, 5)]
SCHEMA = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("b", pa.string())])
DELETION_VECTORS = {"delta.enableDeletionVectors": "true"}


def _commits(path: str) -> list[list[dict[str, Any]]]:
    log = sorted(Path(path, "_delta_log").glob("*.json"))
    return [[json.loads(line) for line in f.read_text().splitlines() if line] for f in log]


def _files(path: str) -> set[str]:
    return {
        str(p.relative_to(path))
        for p in Path(path).rglob("*.parquet")
        if "_delta_log" not in str(p)
    }


@pytest.mark.parametrize("scd_type", [1, 2])
def test_a_target_with_deletion_vectors_rewrites_no_file(scd_type: int) -> None:
    """``delta.enableDeletionVectors=true``: updates and a delete of keys in the first
    batch's file leave that file, its replaced rows marked in one deletion vector; the
    batch adds only its new rows' file."""
    later = [Change((1,), (2,), "upsert", {"a": 10, "b": "y"}), Change((2,), (2,), "delete")]
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type, table_properties=DELETION_VECTORS)
        apply_batch(spec, prepared(FIRST), 0)
        protocol = DeltaTable(spec.target).protocol()
        assert (protocol.min_reader_version, protocol.min_writer_version) == (3, 7)
        assert protocol.reader_features == ["deletionVectors"]
        assert "deletionVectors" in (protocol.writer_features or [])
        before = _files(spec.target)
        apply_batch(spec, prepared(later), 1)
        after = _files(spec.target)
        commit = _commits(spec.target)[-1]
        marked = [a["add"] for a in commit if "add" in a and a["add"].get("deletionVector")]
        assert before < after and len(after - before) == 1
        assert [a["path"] for a in marked] == sorted(before)
        assert marked[0]["deletionVector"]["cardinality"] == 2
        assert json.loads(marked[0]["stats"])["tightBounds"] is False
        assert next(a["txn"] for a in commit if "txn" in a)["version"] == 1
        rows = sorted_rows(read_table(spec.target))
    if scd_type == 1:
        assert rows == [
            {"id": 1, "a": 10, "b": "y"},
            {"id": 3, "a": 3, "b": "x"},
            {"id": 4, "a": 4, "b": "x"},
        ]
    else:
        ended = {START_AT: 1, END_AT: 2}
        assert rows == [
            {"id": 1, "a": 1, "b": "x", **ended},
            {"id": 1, "a": 10, "b": "y", START_AT: 2, END_AT: None},
            {"id": 2, "a": 2, "b": "x", **ended},
            {"id": 3, "a": 3, "b": "x", START_AT: 1, END_AT: None},
            {"id": 4, "a": 4, "b": "x", START_AT: 1, END_AT: None},
        ]


def test_a_file_whose_rows_are_all_replaced_is_removed_without_a_deletion_vector() -> None:
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1)
        apply_batch(spec, prepared(FIRST), 0)
        gone = [Change((k,), (2,), "delete") for k in range(1, 5)]
        apply_batch(spec, prepared(gone), 1)
        commit = _commits(spec.target)[-1]
        assert [next(iter(a)) for a in commit] == ["commitInfo", "remove", "txn"]
        assert not list(Path(spec.target).glob("deletion_vector_*.bin"))
        assert read_table(spec.target).num_rows == 0


HISTORY = [Change((1,), (s,), "upsert", {"a": s, "b": "x"}) for s in (10, 20, 30)] + [
    Change((2,), (10,), "upsert", {"a": 0, "b": "x"})
]


@pytest.mark.parametrize("deletion_vectors", ["true", "false"])
@pytest.mark.parametrize(
    "change",
    [
        Change((1,), (40,), "upsert", {"a": 40, "b": "y"}),  # closes the current version
        Change((1,), (25,), "upsert", {"a": 25, "b": "y"}),  # late: splits the second one
    ],
)
def test_type_2_replaces_only_the_versions_that_change(
    deletion_vectors: str, change: Change
) -> None:
    """Of a key's three versions, a change replaces one: that version taken out (marked,
    or its file rewritten without it) and two inserted, the others and the other keys'
    left as they are."""
    with tempfile.TemporaryDirectory() as folder:
        properties = {"delta.enableDeletionVectors": deletion_vectors}
        spec = spec_for(folder, 2, table_properties=properties)
        apply_batch(spec, prepared(HISTORY), 0)
        outcome = apply_batch(spec, prepared([change]), 1)
        commit = _commits(spec.target)[-1]
        marked = [a["add"] for a in commit if "add" in a and a["add"].get("deletionVector")]
        added = [a["add"] for a in commit if "add" in a and not a["add"].get("deletionVector")]
        counts = sorted(json.loads(a["stats"])["numRecords"] for a in added)
        if deletion_vectors == "true":
            assert [a["deletionVector"]["cardinality"] for a in marked] == [1]
            assert counts == [2]
        else:  # the file of the four versions rewritten with the other three
            assert not marked and counts == [2, 3]
        rows = [r for r in sorted_rows(read_table(spec.target)) if r["id"] == 1]
    starts = sorted({10, 20, 30, change.sequence[0]})
    ends = [*starts[1:], None]
    changed = change.sequence[0]
    assert sorted(rows, key=lambda r: r[START_AT]) == [
        {"id": 1, "a": s, "b": "y" if s == changed else "x", START_AT: s, END_AT: e}
        for s, e in zip(starts, ends, strict=True)
    ]
    assert (outcome.keys, outcome.rows) == (1, 2)


@pytest.mark.parametrize("scd_type", [1, 2])
@pytest.mark.parametrize("partition_cols", [(), ("b",)])
def test_a_default_target_rewrites_the_files_holding_its_keys_and_every_reader_opens_it(
    scd_type: int, partition_cols: tuple[str, ...]
) -> None:
    """No deletion vectors by default: the table keeps reader 1 / writer 2, a later batch
    removes the file that held its keys and adds that file's other rows and its own (its
    partition's values kept), and deltalake's everyday calls read every version."""
    later = [Change((1,), (2,), "upsert", {"a": 10, "b": "x"}), Change((2,), (2,), "delete")]
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type, partition_cols=partition_cols)
        apply_batch(spec, prepared(FIRST), 0)
        table = DeltaTable(spec.target)
        protocol = table.protocol()
        assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
        assert direct_commits.refusal(table) is None
        assert not direct_commits.marks_rows(table)
        before = _files(spec.target)
        apply_batch(spec, prepared(later), 1)
        commit = _commits(spec.target)[-1]
        removed = [a["remove"]["path"] for a in commit if "remove" in a]
        added = [a["add"] for a in commit if "add" in a]
        assert sorted(removed) == sorted(before)
        assert not any(a.get("deletionVector") for a in added)
        assert {json.dumps(a["partitionValues"]) for a in added} == {
            json.dumps({"b": "x"} if partition_cols else {})
        }
        assert all(a["path"].startswith("b=x/") for a in added if partition_cols)
        assert not list(Path(spec.target).rglob("deletion_vector_*.bin"))
        everyday = DeltaTable(spec.target)
        pandas = everyday.to_pandas()
        arrow = everyday.to_pyarrow_table()
        assert sorted_rows(arrow.select(read_table(spec.target).column_names)) == sorted_rows(
            read_table(spec.target)
        )
        assert len(pandas) == arrow.num_rows == (3 if scd_type == 1 else 5)
        assert [h["operation"] for h in everyday.history()] == ["MERGE", "WRITE"]
        assert DeltaTable(spec.target, version=0).to_pyarrow_table().num_rows == 4
        assert polars.read_delta(spec.target).height == arrow.num_rows
        assert polars.read_delta(spec.target, version=0).height == 4


@pytest.mark.parametrize("properties", [{}, DELETION_VECTORS])
def test_every_commit_is_valid_json_for_deltas_readers(properties: dict[str, str]) -> None:
    """A first commit made here (deletion vectors) or by delta-rs says no ``readVersion``
    of -1, which delta-rs' ``history()`` cannot parse; polars and DuckDB read either
    table."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, table_properties=properties)
        apply_batch(spec, prepared(FIRST), 0)
        apply_batch(spec, prepared([Change((1,), (2,), "delete")]), 1)
        infos = [c[0]["commitInfo"] for c in _commits(spec.target)]
        assert all(i.get("readVersion", 0) >= 0 for i in infos)
        assert len(DeltaTable(spec.target).history()) == 2
        assert polars.read_delta(spec.target).height == 3
        theirs = duckdb_tables.delta_rows(spec.target)
        ours = read_table(spec.target)
        assert sorted_rows(theirs.cast(ours.schema)) == sorted_rows(ours)


def test_a_file_of_several_row_groups_is_rewritten_a_file_per_row_group() -> None:
    """A target of ten rows in row groups of three (another writer made it): a batch
    that updates a key of the first group, deletes every key of the second and inserts a
    new one rewrites the file as one per group left (the second has none), and the next
    batch finds its keys in them (their key indexes kept from the rewrite)."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1)
        rows = pa.table(
            {"id": list(range(10)), "a": list(range(10)), "b": ["x"] * 10}, schema=SCHEMA
        )
        write_deltalake(spec.target, rows, writer_properties=WriterProperties(max_row_group_size=3))
        first = [Change((0,), (1,), "upsert", {"a": 100, "b": "y"})]
        first += [Change((k,), (1,), "delete") for k in (3, 4, 5)]
        first += [Change((20,), (1,), "upsert", {"a": 20, "b": "z"})]
        apply_batch(spec, prepared(first), 0)
        commit = _commits(spec.target)[-1]
        added = sorted(json.loads(a["add"]["stats"])["numRecords"] for a in commit if "add" in a)
        assert added == [1, 2, 2, 3]  # groups [1, 2], [6, 7, 8], [9]; the batch: 0 and 20
        second = [Change((k,), (2,), "upsert", {"a": -k, "b": "w"}) for k in (1, 7, 9)]
        apply_batch(spec, prepared(second), 1)
        have = {r["id"]: (r["a"], r["b"]) for r in read_table(spec.target).to_pylist()}
    assert have == {
        0: (100, "y"),
        1: (-1, "w"),
        2: (2, "x"),
        6: (6, "x"),
        7: (-7, "w"),
        8: (8, "x"),
        9: (-9, "w"),
        20: (20, "z"),
    }


def test_a_target_keeping_a_change_data_feed_takes_delta_rs_merge() -> None:
    """delta-rs writes the change data files a change data feed needs; this path does
    not, so such a target is merged by delta-rs."""
    later = [Change((1,), (2,), "upsert", {"a": 10, "b": "y"})]
    with tempfile.TemporaryDirectory() as folder:
        properties = {"delta.enableChangeDataFeed": "true"}
        spec = spec_for(folder, 1, table_properties=properties)
        apply_batch(spec, prepared(FIRST), 0)
        assert direct_commits.refusal(DeltaTable(spec.target)) == "it keeps a change data feed"
        apply_batch(spec, prepared(later), 1)
        assert Path(spec.target, "_change_data").is_dir()
        info = _commits(spec.target)[-1][0]["commitInfo"]
        assert info["operation"] == "MERGE" and info["engineInfo"] != committer.ENGINE_INFO


def test_properties_and_partitions_reach_a_new_target() -> None:
    properties = {"delta.checkpointInterval": "3", "delta.logRetentionDuration": "interval 7 days"}
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, table_properties=properties, partition_cols=("b",))
        apply_batch(spec, prepared(FIRST), 0)
        metadata = DeltaTable(spec.target).metadata()
        assert metadata.partition_columns == ["b"]
        assert metadata.configuration == properties
        state = DeltaTable(spec.state).metadata()
        assert state.partition_columns == [] and state.configuration == {}


@pytest.mark.parametrize("asked", [("a",), ("b", "a")])
def test_partition_columns_other_than_the_targets_are_refused_before_any_write(
    asked: tuple[str, ...],
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, partition_cols=("b",))
        apply_batch(spec, prepared(FIRST), 0)
        other = spec_for(folder, 1, partition_cols=asked)
        with pytest.raises(ChangelogSourceError) as refused:
            apply_batch(other, prepared([Change((1,), (2,), "delete")]), 1)
        assert DeltaTable(spec.target).version() == DeltaTable(spec.state).version() == 0
    assert refused.value.condition == "APPLY_CHANGES.INVALID_PARAMETER"
    assert refused.value.parameters["parameter"] == "partition_cols"
    assert "partitioned by ['b']" in str(refused.value)


@pytest.mark.parametrize("properties", [{}, DELETION_VECTORS])
def test_a_direct_commit_that_loses_a_race_is_made_again_on_the_new_snapshot(
    properties: dict[str, str],
) -> None:
    """Another writer appends a row of key 1 after this writer opened the target: the
    commit lost at its version is made on the next, and takes that row out too; the
    files of the lost attempt are gone."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, table_properties=properties)
        apply_batch(spec, prepared(FIRST[:2]), 0)
        ours = DeltaTable(spec.target)  # as this writer opened it
        other = pa.table({"id": [1, 3], "a": [9, 3], "b": ["other", "z"]}, schema=SCHEMA)
        write_deltalake(spec.target, other, mode="append")
        rows = pa.table({"id": [1], "a": [7], "b": ["new"]}, schema=SCHEMA)
        direct_commits.replace_rows(ours, spec, 1, rows.select(["id"]), rows, None)
        table = DeltaTable(spec.target)
        assert (table.version(), table.transaction_version(spec.app_id)) == (2, 1)
        committed = {a["add"]["path"] for c in _commits(spec.target) for a in c if "add" in a}
        assert _files(spec.target) == committed  # the lost attempt's files are gone
        assert sorted_rows(read_table(spec.target)) == [
            {"id": 1, "a": 7, "b": "new"},
            {"id": 2, "a": 2, "b": "x"},
            {"id": 3, "a": 3, "b": "z"},
        ]


def test_a_lost_race_to_make_a_target_with_deletion_vectors_is_a_concurrent_write() -> None:
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1)
        write_deltalake(spec.target, SCHEMA.empty_table())  # the other writer, first
        with pytest.raises(ChangelogSourceError) as refused:
            rows = aligned(prepared(FIRST).select(["id", "a", "b"]), SCHEMA)
            direct_commits.create(spec.target, spec, rows, 0, None, {}, [], deletion_vectors=True)
        assert [next(iter(a)) for c in _commits(spec.target) for a in c if "txn" in a] == []
        assert DeltaTable(spec.target).version() == 0
    assert refused.value.condition == "APPLY_CHANGES.CONCURRENT_WRITE"


@pytest.mark.parametrize("scd_type", [1, 2])
@pytest.mark.parametrize(
    ("properties", "partition_cols"), [({}, ()), ({}, ("b",)), (DELETION_VECTORS, ())]
)
def test_tables_the_tasks_write_open_in_every_reader(
    scd_type: int, properties: dict[str, str], partition_cols: tuple[str, ...]
) -> None:
    """A first load resolved by two tasks makes each table by one commit of this package
    naming the tasks' files (delta-rs' protocol and metadata: reader 1 / writer 2, or 3 / 7
    with deletion vectors; the properties and partitions asked for); a full refresh by
    the tasks is one commit per table removing every file and adding the new ones. Every
    version opens in deltalake (without deletion vectors, which its reads refuse), polars
    and DuckDB with the engine's rows."""
    feed = [Change((k,), (1,), "upsert", {"a": k, "b": "xy"[k % 2]}) for k in range(1, 41)]
    again = feed[5:30]
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(
            folder,
            scd_type,
            table_properties=properties,
            partition_cols=partition_cols,
            key_buckets=2,
        )
        applied_in_tasks(spec, feed, 0, 2, hashed=True)
        for path in (spec.target, spec.state):
            (commit,) = _commits(path)
            assert commit[0]["commitInfo"]["engineInfo"] == committer.ENGINE_INFO
            assert any("add" in a for a in commit)
        table = DeltaTable(spec.target)
        protocol = table.protocol()
        expected = (3, 7) if properties else (1, 2)
        assert (protocol.min_reader_version, protocol.min_writer_version) == expected
        assert table.metadata().partition_columns == list(partition_cols)
        assert table.metadata().configuration == properties
        first_files = _files(spec.target)
        refresh = dataclasses.replace(spec, full_refresh=True, app_id="refresh-writer")
        applied_in_tasks(refresh, again, 0, 2, hashed=True)
        commit = _commits(spec.target)[-1]
        assert {a["remove"]["path"] for a in commit if "remove" in a} == first_files
        assert len(_commits(spec.state)) == 2
        ours = read_table(spec.target)
        assert ours.num_rows == len(again)
        for version, rows in ((0, len(feed)), (1, len(again))):
            if not properties:  # deltalake's reads refuse the deletionVectors feature
                assert DeltaTable(spec.target, version=version).to_pyarrow_table().num_rows == rows
            assert polars.read_delta(spec.target, version=version).height == rows
        assert len(DeltaTable(spec.target).history()) == 2
        theirs = duckdb_tables.delta_rows(spec.target)
        assert sorted_rows(theirs.cast(ours.schema).select(ours.column_names)) == sorted_rows(ours)
