"""The server's apply step into Iceberg targets (a SQL catalog on SQLite, as pyiceberg
commits to it) against the plain-Python model, as tests/unit/test_apply_model.py does for
Delta targets: random feeds in random batches make the target the model makes of the whole
feed (whole rows and the schema), a batch applied again changes nothing, and each batch is
one snapshot of the target marked with its writer and number."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from spark_cdc.server_plugin.errors import ChangelogSourceError
from spark_cdc.server_plugin.iceberg.table import catalog_from
from spark_cdc.server_plugin.sinks.apply.engine.spec import (
    END_AT,
    OP,
    START_AT,
    UPSERT,
    ApplySpec,
    sequence_column,
)
from spark_cdc.server_plugin.sinks.apply.iceberg import rewrites as iceberg_rewrites
from spark_cdc.server_plugin.sinks.apply.iceberg import tables as iceberg_tables
from spark_cdc.server_plugin.sinks.apply.task import apply_batch

from tests.support.apply_feeds import MODEL, batches, expected, feeds, target_schema
from tests.support.apply_model import Change
from tests.support.apply_targets import VALUES, prepared, read_iceberg, sorted_rows, spec_for


def apply_all(spec: ApplySpec, parts: list[list[Change]]) -> list[dict[str, Any]]:
    for version, part in enumerate(parts):
        apply_batch(spec, prepared(part), version)
    table = read_iceberg(dict(spec.catalog), spec.target)
    assert [(f.name, f.type) for f in table.schema] == target_schema(spec)
    return sorted_rows(table)


def _rows(spec: ApplySpec) -> list[dict[str, Any]]:
    return sorted_rows(read_iceberg(dict(spec.catalog), spec.target))


def _table(spec: ApplySpec, name: str | None = None) -> Any:
    return catalog_from(dict(spec.catalog)).load_table(name or spec.target)


@MODEL
@given(
    data=st.data(),
    scd_type=st.sampled_from([1, 2]),
    ignore_nulls=st.booleans(),
    partition_cols=st.sampled_from([(), ("b",)]),
    mode=st.sampled_from(["copy-on-write", "merge-on-read"]),
)
def test_target_equals_the_model_of_the_whole_feed(
    data: st.DataObject,
    scd_type: int,
    ignore_nulls: bool,
    partition_cols: tuple[str, ...],
    mode: str,
) -> None:
    """Type 1's state compacted after every batch, or never; the target partitioned or
    not; its replaced rows rewritten or marked deleted (``write.merge.mode``)."""
    changes = data.draw(feeds(truncates=scd_type == 1))
    parts = data.draw(batches(changes))
    tracked = data.draw(st.sampled_from([VALUES, ("a",), ("b",)]))
    compact = data.draw(st.sampled_from([1, 64]))
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(
            folder,
            scd_type,
            iceberg=True,
            ignore_null_updates=ignore_nulls,
            tracked=tracked,
            compact_after_files=compact,
            partition_cols=partition_cols,
            table_properties={"write.merge.mode": mode},
        )
        assert apply_all(spec, parts) == expected(changes, spec)


@MODEL
@given(data=st.data(), scd_type=st.sampled_from([1, 2]))
def test_a_batch_applied_again_changes_nothing(data: st.DataObject, scd_type: int) -> None:
    """The last batch again under its own marker (skipped), or any batch under another
    writer's (the same changes seen twice: each is one change)."""
    changes = data.draw(feeds(truncates=False))
    parts = data.draw(batches(changes))
    again = data.draw(st.integers(0, len(parts) - 1))
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type, iceberg=True)
        before = apply_all(spec, parts)
        snapshots = len(_table(spec).metadata.snapshots)
        assert apply_batch(spec, prepared(parts[-1]), len(parts) - 1).skipped
        assert len(_table(spec).metadata.snapshots) == snapshots
        other = spec_for(folder, scd_type, iceberg=True, app_id="another-writer")
        assert not apply_batch(other, prepared(parts[again]), 0).skipped
        assert _rows(spec) == before == expected(changes, spec)


@pytest.mark.parametrize("scd_type", [1, 2])
def test_each_batch_is_one_snapshot_marked_with_its_writer_and_number(scd_type: int) -> None:
    """The first batch makes the table (one catalog commit, its rows in it); each later
    batch that changes the target adds one snapshot, whose summary names the writer and
    the batch; the identifier fields are the keys (type 2: and ``__START_AT``)."""
    parts = [
        [Change((1,), (1,), "upsert", {"a": 1, "b": "x"}), Change((2,), (1,), "upsert", {})],
        [Change((1,), (2,), "upsert", {"a": 2, "b": "x"})],
        [Change((2,), (3,), "delete")],
    ]
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type, iceberg=True)
        for version, part in enumerate(parts):
            apply_batch(spec, prepared(part), version)
            table = _table(spec)
            assert len(table.metadata.snapshots) == version + 1
            summary = table.current_snapshot().summary.additional_properties
            assert summary[iceberg_tables.WRITER_KEY] == spec.app_id
            assert summary[iceberg_tables.BATCH_KEY] == str(version)
        schema = table.schema()
        identifiers = {schema.find_column_name(i) for i in schema.identifier_field_ids}
        assert identifiers == ({"id"} if scd_type == 1 else {"id", START_AT})
        state = _table(spec, spec.state)
        assert iceberg_tables.last_batch(state, spec.app_id) == len(parts) - 1


def test_a_batch_that_changes_nothing_commits_nothing_to_the_target() -> None:
    """A late change (type 1) changes no row: the state's snapshot alone records it."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, iceberg=True)
        apply_batch(spec, prepared([Change((1,), (5,), "upsert", {"a": 1, "b": "x"})]), 0)
        done = apply_batch(spec, prepared([Change((1,), (3,), "upsert", {"a": 2})]), 1)
        assert (done.keys, done.rows) == (0, 0)
        assert len(_table(spec).metadata.snapshots) == 1
        assert iceberg_tables.last_batch(_table(spec, spec.state), spec.app_id) == 1


def test_a_batch_rewrites_only_the_files_that_hold_its_keys() -> None:
    """Copy-on-write: the files whose key bounds cannot hold the batch's keys stay."""
    first = [Change((k,), (1,), "upsert", {"a": k}) for k in range(10)]
    second = [Change((k,), (1,), "upsert", {"a": k}) for k in range(100, 110)]
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, iceberg=True)
        apply_batch(spec, prepared(first), 0)
        apply_batch(spec, prepared(second), 1)
        apply_batch(spec, prepared([Change((105,), (2,), "upsert", {"a": -1})]), 2)
        summary = _table(spec).current_snapshot().summary.additional_properties
        assert (summary["deleted-data-files"], summary["added-data-files"]) == ("1", "1")
        rows = _rows(spec)
        assert len(rows) == 20 and {"id": 105, "a": -1, "b": None} in rows


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_a_large_batch_of_clustered_keys_leaves_the_files_between_its_runs_to_other_writers(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """A batch of more keys than a set prunes by, in runs (updated ids at the start, new ids
    after the last): the files between the runs are neither rewritten nor declared changed,
    so another writer's row committed there meanwhile is pyiceberg's to retry the batch on,
    and both land; every row is the model's."""
    files = [range(0, 1000), range(1000, 2000), range(2000, 3000)]
    updated, new = range(0, 250), range(5000, 5250)
    with tempfile.TemporaryDirectory() as folder:
        properties = {"write.merge.mode": mode}
        spec = spec_for(folder, 1, iceberg=True, table_properties=properties)
        for version, ids in enumerate(files):
            apply_batch(
                spec, prepared([Change((k,), (1,), "upsert", {"a": k}) for k in ids]), version
            )
        other = _table(spec)
        planned = iceberg_rewrites._candidates

        def interleaved(table: Any, declared: Any) -> list[Any]:
            found = planned(table, declared)
            row = pa.table({"id": [1500], "a": [-1], "b": ["other"]})  # between the runs
            other.append(row.cast(other.schema().as_arrow()))
            return found

        monkeypatch.setattr(iceberg_rewrites, "_candidates", interleaved)
        batch = [Change((k,), (2,), "upsert", {"a": -k, "b": "x"}) for k in [*updated, *new]]
        apply_batch(spec, prepared(batch), len(files))
        summary = _table(spec).current_snapshot().summary.additional_properties
        assert summary[iceberg_tables.BATCH_KEY] == str(len(files))
        # Only the first file held replaced rows: it alone is rewritten, or marked.
        touched = "deleted-data-files" if mode == "copy-on-write" else "added-delete-files"
        assert summary[touched] == "1"
        want = [{"id": k, "a": k, "b": None} for ids in files for k in ids if k not in updated]
        want += [{"id": k, "a": -k, "b": "x"} for k in [*updated, *new]]
        want += [{"id": 1500, "a": -1, "b": "other"}]
        assert _rows(spec) == sorted_rows(pa.Table.from_pylist(want))


@given(values=st.sets(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=300))
def test_a_batchs_keys_are_declared_as_few_ranges_that_hold_every_one(values: set[int]) -> None:
    """At most ``_RANGES`` ordered, disjoint ranges, each from one key to another, every key
    in one of them."""
    runs = iceberg_rewrites._runs(pa.array(sorted(values), pa.int64()))
    assert 1 <= len(runs) <= iceberg_rewrites._RANGES
    assert all(low <= high for low, high in runs)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(runs))
    assert {low for low, _ in runs} | {high for _, high in runs} <= values
    assert all(any(low <= v <= high for low, high in runs) for v in values)


def test_a_replaced_checkpoint_is_refused_not_skipped() -> None:
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, iceberg=True)
        for version in range(3):
            apply_batch(spec, prepared([Change((1,), (version,), "upsert", {})]), version)
        with pytest.raises(ChangelogSourceError) as refused:
            apply_batch(spec, prepared([Change((1,), (9,), "upsert", {})]), 0)
        assert refused.value.condition == "APPLY_CHANGES.CHECKPOINT_REPLACED"


def test_a_target_of_the_other_scd_type_is_refused_by_its_type() -> None:
    with tempfile.TemporaryDirectory() as folder:
        apply_batch(
            spec_for(folder, 1, iceberg=True), prepared([Change((1,), (1,), "upsert", {})]), 0
        )
        with pytest.raises(ChangelogSourceError) as refused:
            history = spec_for(folder, 2, iceberg=True, app_id="history")
            apply_batch(history, prepared([Change((1,), (2,), "upsert", {})]), 0)
        assert refused.value.condition == "APPLY_CHANGES.SCD_TYPE_MISMATCH"


@pytest.mark.parametrize(
    "catalog", [(("warehouse", "w"),), (("type", "dynamodb"),)], ids=["no type", "read-only"]
)
def test_a_catalog_that_cannot_be_built_or_commit_is_refused_by_name(
    catalog: tuple[tuple[str, str], ...],
) -> None:
    """No type to build a catalog by, or one whose commits pyiceberg does not implement
    (it would fail after writing the batch's files): refused, nothing written."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, iceberg=True)
        broken = ApplySpec(**{**spec.__dict__, "catalog": catalog})
        with pytest.raises(ChangelogSourceError) as refused:
            apply_batch(broken, prepared([Change((1,), (1,), "upsert", {})]), 0)
        assert refused.value.condition == "APPLY_CHANGES.CATALOG_FAILED"
        assert not any(Path(folder).iterdir())


@pytest.mark.parametrize("same_key", [False, True])
def test_another_writers_commit_between_the_read_and_the_commit(
    monkeypatch: pytest.MonkeyPatch, same_key: bool
) -> None:
    """Another writer appends to the target after the batch planned its rewrite and before
    it commits: a row of another key is pyiceberg's to retry the batch on (both land); a
    row of one of the batch's keys would make that key twice, so the batch is refused with
    nothing of it written, its state commit included."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, iceberg=True)
        apply_batch(spec, prepared([Change((k,), (1,), "upsert", {"a": k}) for k in (1, 2, 3)]), 0)
        other = _table(spec)  # the other writer's own handle
        planned = iceberg_rewrites._candidates

        def interleaved(table: Any, declared: Any) -> list[Any]:
            found = planned(table, declared)
            key = 2 if same_key else 100
            row = pa.table({"id": [key], "a": [-1], "b": ["other"]})
            other.append(row.cast(other.schema().as_arrow()))
            return found

        monkeypatch.setattr(iceberg_rewrites, "_candidates", interleaved)
        batch = prepared([Change((2,), (2,), "upsert", {"a": 20, "b": "x"})])
        theirs = {"id": 2 if same_key else 100, "a": -1, "b": "other"}
        if not same_key:
            apply_batch(spec, batch, 1)
            want = [{"id": 1, "a": 1, "b": None}, {"id": 2, "a": 20, "b": "x"}]
            want += [{"id": 3, "a": 3, "b": None}, theirs]
            assert _rows(spec) == sorted_rows(pa.Table.from_pylist(want))
            return
        with pytest.raises(ChangelogSourceError) as refused:
            apply_batch(spec, batch, 1)
        assert refused.value.condition == "APPLY_CHANGES.CONCURRENT_WRITE"
        want = [{"id": k, "a": k, "b": None} for k in (1, 2, 3)] + [theirs]
        assert _rows(spec) == sorted_rows(pa.Table.from_pylist(want))
        assert iceberg_tables.last_batch(_table(spec, spec.state), spec.app_id) == 0


def test_keys_iceberg_cannot_identify_rows_by_are_refused_before_any_write() -> None:
    """Iceberg's identifier fields cannot be floating point: refused by name, with no
    namespace, table or file made."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, iceberg=True)
        batch = prepared([Change((1,), (1,), "upsert", {})])
        batch = batch.set_column(0, "id", batch.column("id").cast(pa.float64()))
        with pytest.raises(ChangelogSourceError) as refused:
            apply_batch(spec, batch, 0)
        assert refused.value.condition == "APPLY_CHANGES.INVALID_PARAMETER"
        assert refused.value.parameters["parameter"] == "keys"
        assert not catalog_from(dict(spec.catalog)).list_namespaces()
        assert [p.name for p in Path(folder).iterdir()] == ["catalog.db"]


def test_a_sequence_of_two_parts_opens_and_closes_versions_by_its_struct() -> None:
    """Type 2 with a two-part sequence: ``__START_AT`` is a struct, an identifier field by
    its parts, and a later batch closes the version it names (matched part by part)."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 2, iceberg=True)
        spec = ApplySpec(**{**spec.__dict__, "sequence_names": ("major", "minor")})

        def batch(major: int, minor: int, a: int) -> pa.Table:
            return pa.table(
                {
                    "id": pa.array([1], pa.int64()),
                    "a": pa.array([a], pa.int64()),
                    "b": pa.array(["x"], pa.string()),
                    sequence_column(0): pa.array([major], pa.int64()),
                    sequence_column(1): pa.array([minor], pa.int64()),
                    OP: pa.array([UPSERT], pa.int8()),
                }
            )

        apply_batch(spec, batch(1, 5, 10), 0)
        apply_batch(spec, batch(2, 0, 20), 1)
        start = [{"major": 1, "minor": 5}, {"major": 2, "minor": 0}]
        want = [
            {"id": 1, "a": 10, "b": "x", START_AT: start[0], END_AT: start[1]},
            {"id": 1, "a": 20, "b": "x", START_AT: start[1], END_AT: None},
        ]
        assert _rows(spec) == sorted_rows(pa.Table.from_pylist(want))
        schema = _table(spec).schema()
        names = {schema.find_column_name(i) for i in schema.identifier_field_ids}
        assert names == {"id", f"{START_AT}.major", f"{START_AT}.minor"}
