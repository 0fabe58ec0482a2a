"""An Iceberg target's batches resolved by tasks, each the changes of its keys
(``iceberg_shares``), on real tables of a SQL catalog: the target is the model's of the
whole feed in every split of tasks, the state is laid out by key bucket (each data file
holds one bucket's rows), the tasks' files are the ones the commit adds, and what goes
wrong between the tasks and the commit is refused or cleaned up by name."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st
from spark_cdc.server_plugin.errors import ChangelogSourceError
from spark_cdc.server_plugin.iceberg.table import catalog_from
from spark_cdc.server_plugin.sinks.apply.engine.batch import Share
from spark_cdc.server_plugin.sinks.apply.engine.spec import BUCKET, KEY_HASH, ApplySpec
from spark_cdc.server_plugin.sinks.apply.iceberg import files as iceberg_files
from spark_cdc.server_plugin.sinks.apply.iceberg import state as iceberg_state
from spark_cdc.server_plugin.sinks.apply.iceberg import tables as iceberg_tables
from spark_cdc.server_plugin.sinks.apply.task import apply_batch, apply_shares, resolve_share

from tests.support.apply_feeds import MODEL, batches, expected, feeds, target_schema
from tests.support.apply_model import Change
from tests.support.apply_targets import (
    VALUES,
    key_hash,
    prepared,
    read_iceberg,
    sorted_rows,
    spec_for,
)


def _shares(spec: ApplySpec, changes: list[Change], tasks: int) -> list[Share]:
    """``changes`` split among ``tasks`` by their keys' hash, as Spark's ``repartition``
    places them, each share resolved as its task resolves it."""
    split = [[c for c in changes if key_hash(c.key[0]) % tasks == t] for t in range(tasks)]
    resolved = [resolve_share(spec, prepared(s, hashed=True)) for s in split if s]
    return [s for s in resolved if s is not None]


def _table(spec: ApplySpec, name: str) -> Any:
    return catalog_from(dict(spec.catalog)).load_table(name)


def _rows(spec: ApplySpec) -> list[dict[str, Any]]:
    return sorted_rows(read_iceberg(dict(spec.catalog), spec.target))


def _files(folder: str) -> set[str]:
    """Every Parquet file under ``folder`` (data files: committed or not)."""
    return {str(p) for p in Path(folder).rglob("*.parquet")}


def _described(state: Any, spec: ApplySpec) -> pa.Table | None:
    """The state's files as its key lookup sees them (None: scanned by pyiceberg)."""
    names = (*spec.keys, spec.sequence[0])
    return iceberg_files.described(state, names, list(state.scan().plan_files()))


def _assert_laid_out(spec: ApplySpec, count: int) -> None:
    """Every data file of the state holds only rows whose key hashes to its bucket."""
    state = _table(spec, spec.state)
    assert iceberg_state.layout(state).buckets == count
    for task in state.scan().plan_files():
        bucket = task.file.partition[0]
        path = task.file.file_path.removeprefix("file://")
        hashes = pq.read_table(path, columns=[KEY_HASH]).column(KEY_HASH).to_numpy()
        assert set(np.mod(hashes.astype(np.int64), count)) == {bucket}


@MODEL
@given(
    data=st.data(),
    scd_type=st.sampled_from([1, 2]),
    tasks=st.sampled_from([1, 2, 3]),
    ignore_nulls=st.booleans(),
)
def test_tasks_each_resolving_their_keys_make_the_models_target(
    data: st.DataObject, scd_type: int, tasks: int, ignore_nulls: bool
) -> None:
    """Random feeds (late changes, deletes, duplicates, NULL updates) in random batches,
    each split among the tasks; type 1's state compacted after every batch, or never; the
    state's files searched by their key indexes, or scanned (a state with a second
    schema); the target's replaced rows rewritten or marked deleted."""
    changes = data.draw(feeds(truncates=False))
    parts = data.draw(batches(changes))
    compact = data.draw(st.sampled_from([1, 64]))
    tracked = data.draw(st.sampled_from([VALUES, ("a",)]))
    second_schema = data.draw(st.booleans())  # the state read by pyiceberg's scan instead
    mode = data.draw(st.sampled_from(["copy-on-write", "merge-on-read"]))
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(
            folder,
            scd_type,
            iceberg=True,
            ignore_null_updates=ignore_nulls,
            tracked=tracked,
            compact_after_files=compact,
            key_buckets=tasks,
            table_properties={"write.merge.mode": mode},
        )
        for version, part in enumerate(parts):
            apply_shares(spec, _shares(spec, part, tasks), version)
            if second_schema and version == 0:
                with _table(spec, spec.state).update_schema() as change:
                    change.update_column("id", doc="a schema of its own")
        table = read_iceberg(dict(spec.catalog), spec.target)
        assert [(f.name, f.type) for f in table.schema] == target_schema(spec)
        assert sorted_rows(table) == expected(changes, spec)
        if tasks > 1:
            _assert_laid_out(spec, tasks)


def _first(spec: ApplySpec) -> None:
    rows = [Change((k,), (1,), "upsert", {"a": k, "b": "x"}) for k in range(20)]
    apply_shares(spec, _shares(spec, rows, 2), 0)


LATER = [Change((k,), (2,), "upsert", {"a": -k, "b": "y"}) for k in (3, 7, 30)]


def test_the_tasks_write_the_files_the_commit_adds() -> None:
    """A later batch's new rows are written by the tasks, as data files of the target and
    of the state that the commit's snapshots add, nothing else left behind."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 2, iceberg=True, key_buckets=2)
        _first(spec)
        before = _files(folder)
        shares = _shares(spec, LATER, 2)
        staged = {f.file_path.removeprefix("file://") for s in shares for f in s.staged.target}
        staged |= {f.file_path.removeprefix("file://") for s in shares for f in s.staged.state}
        assert all(s.staged.target and s.staged.state for s in shares)
        assert all(not s.resolution.rows.num_rows for s in shares)  # they do not travel
        done = apply_shares(spec, shares, 1)
        assert (done.changes, done.keys, done.rows) == (3, 3, 5)
        summary = _table(spec, spec.target).current_snapshot().summary.additional_properties
        assert summary[iceberg_tables.BATCH_KEY] == "1"
        assert '"tasks": 2' in summary[iceberg_tables.OUTCOME_KEY]
        held = {
            p.removeprefix("file://")
            for name in (spec.target, spec.state)
            for p in iceberg_tables.file_paths(_table(spec, name))
        }
        assert staged <= held
        assert _files(folder) - before <= staged | held
        state = _table(spec, spec.state)  # searched by its files' key indexes
        assert _described(state, spec) is not None


def test_shares_resolved_before_another_writers_state_commit_are_refused_whole() -> None:
    """Another writer committed to the state after the tasks read it: the shares may miss
    its changes, so nothing of the batch is written and the tasks' files are deleted."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, iceberg=True, key_buckets=2)
        _first(spec)
        shares = _shares(spec, LATER, 2)
        other = spec_for(folder, 1, iceberg=True, key_buckets=2, app_id="another-writer")
        apply_shares(other, _shares(other, [Change((3,), (9,), "upsert", {"a": 9})], 2), 0)
        before, rows = _files(folder), _rows(spec)
        with pytest.raises(ChangelogSourceError) as refused:
            apply_shares(spec, shares, 1)
        assert refused.value.condition == "APPLY_CHANGES.CONCURRENT_WRITE"
        assert _rows(spec) == rows
        staged = {f.file_path.removeprefix("file://") for s in shares for f in s.staged.target}
        assert staged and not staged & _files(folder)
        assert _files(folder) < before


def test_a_batch_applied_again_deletes_its_tasks_files() -> None:
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 2, iceberg=True, key_buckets=2)
        _first(spec)
        apply_shares(spec, _shares(spec, LATER, 2), 1)
        before, rows = _files(folder), _rows(spec)
        assert apply_shares(spec, _shares(spec, LATER, 2), 1).skipped
        assert _files(folder) == before and _rows(spec) == rows


def test_a_batch_that_fails_after_its_target_snapshot_keeps_the_targets_files(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The state's snapshot fails after the target's: the target's new files are its own
    now and stay; the state's go; the batch run again completes it."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 2, iceberg=True, key_buckets=2)
        _first(spec)
        shares = _shares(spec, LATER, 2)

        def unwritable(*_: Any, **__: Any) -> None:
            raise OSError("the state's storage is gone")

        monkeypatch.setattr(iceberg_state, "append", unwritable)
        with pytest.raises(OSError):
            apply_shares(spec, shares, 1)
        monkeypatch.undo()
        rows = _rows(spec)  # reads every file its snapshot names
        assert len(rows) == 23
        state_files = {f.file_path.removeprefix("file://") for s in shares for f in s.staged.state}
        assert not state_files & _files(folder)
        apply_shares(spec, _shares(spec, LATER, 2), 1)
        assert _rows(spec) == rows
        assert iceberg_tables.last_batch(_table(spec, spec.state), spec.app_id) == 1


def test_a_state_made_before_the_layout_goes_on_unbucketed() -> None:
    """A state without key hashes (made before the layout) is read whole by each task and
    written as it is: the target is still the model's."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, iceberg=True, key_buckets=2)
        apply_batch(spec, prepared([Change((1,), (1,), "upsert", {"a": 1})]), 0)  # no hashes
        state = _table(spec, spec.state)
        assert iceberg_state.layout(state).buckets is None
        assert KEY_HASH not in state.schema().column_names
        later = [Change((1,), (2,), "upsert", {"a": 2}), Change((5,), (2,), "upsert", {"a": 5})]
        apply_shares(spec, _shares(spec, later, 2), 1)
        assert _rows(spec) == [{"id": 1, "a": 2, "b": None}, {"id": 5, "a": 5, "b": None}]
        assert BUCKET not in _table(spec, spec.state).schema().column_names


@pytest.mark.parametrize("edit", ["bucket count", "partitioning"])
def test_a_state_whose_layout_was_removed_by_hand_is_refused_by_name(edit: str) -> None:
    """Its bucket count (a table property) or its partitioning by bucket removed: its rows
    can no longer be found, nor written, by bucket."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, iceberg=True, key_buckets=2)
        _first(spec)
        state = _table(spec, spec.state)
        if edit == "bucket count":
            with state.transaction() as change:
                change.remove_properties(iceberg_state.BUCKETS_PROPERTY)
        else:
            with state.update_spec() as removal:
                removal.remove_field(BUCKET)
        with pytest.raises(ChangelogSourceError) as refused:
            _shares(spec, LATER, 2)
        assert refused.value.condition == "APPLY_CHANGES.STATE_LAYOUT_CHANGED"
        named = iceberg_state.BUCKETS_PROPERTY if edit == "bucket count" else BUCKET
        assert named in str(refused.value)


def test_a_states_files_are_described_by_their_iceberg_bounds() -> None:
    """What the key lookup prunes files by: each file's bounds of the keys and of the
    sequence (text, dates, timestamps), decoded from Iceberg's, hold its values (text cut
    short below and above them), and its NULL counts are its own."""
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, iceberg=True)
        spec = ApplySpec(**{**spec.__dict__, "keys": ("k", "day"), "columns": ("k", "day")})
        catalog = catalog_from(dict(spec.catalog))
        catalog.create_namespace("db")
        schema = pa.schema(
            [
                ("k", pa.string()),
                ("day", pa.date32()),
                (spec.sequence[0], pa.timestamp("us", "UTC")),
            ]
        )
        table = catalog.create_table(spec.state, schema=schema)
        files = []
        for _ in range(4):
            size = 50
            words = [
                f"key-{'x' * int(n)}-{n}" if n % 5 else None for n in rng.integers(0, 30, size)
            ]
            rows = pa.table(
                {
                    "k": pa.array(words, pa.string()),
                    "day": pa.array(rng.integers(0, 20_000, size), pa.int32()).cast(pa.date32()),
                    spec.sequence[0]: pa.array(rng.integers(0, 2**50, size), pa.int64()).cast(
                        pa.timestamp("us", "UTC")
                    ),
                }
            )
            table.append(rows)
            files.append(rows)
        table = catalog.load_table(spec.state)
        tasks = list(table.scan().plan_files())
        described = _described(table, spec)
        assert described is not None and described.num_rows == 4
        by_path = {t.file.file_path: t for t in tasks}
        for row in described.to_pylist():
            held = pq.read_table(by_path[row["path"]].file.file_path.removeprefix("file://"))
            for name in ("k", "day", spec.sequence[0]):
                low, high = pc.min_max(held.column(name)).values()
                assert row[f"min.{name}"] <= low.as_py() and row[f"max.{name}"] >= high.as_py()
                if name != "k":  # exact
                    assert (row[f"min.{name}"], row[f"max.{name}"]) == (low.as_py(), high.as_py())
                assert row[f"null_count.{name}"] == held.column(name).null_count


def test_tasks_that_find_a_new_sql_catalogs_tables_made_by_another_build_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch's tasks all open a SQL catalog no one used yet: each makes its tables, and
    those that lose the race see ``already exists`` (SQLAlchemy's, through pyiceberg);
    they build it again. A catalog that keeps failing is refused by name."""
    from spark_cdc.server_plugin.iceberg import table as iceberg_table

    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, iceberg=True)
        real = iceberg_table.catalog_from
        calls = []

        def racing(properties: dict[str, str], name: str | None = None) -> Any:
            calls.append(name)
            if len(calls) == 1:
                raise RuntimeError("(sqlite3.OperationalError) table iceberg_tables already exists")
            return real(properties, name)

        monkeypatch.setattr(iceberg_table, "catalog_from", racing)
        assert next(iceberg_tables.catalogs(spec)).list_namespaces() == []
        assert len(calls) == 2

        def lost(properties: dict[str, str], name: str | None = None) -> Any:
            raise RuntimeError("(sqlite3.OperationalError) table iceberg_tables already exists")

        monkeypatch.setattr(iceberg_table, "catalog_from", lost)
        with pytest.raises(ChangelogSourceError) as refused:
            next(iceberg_tables.catalogs(spec))
        assert refused.value.condition == "APPLY_CHANGES.CATALOG_FAILED"


def test_a_type_2_states_small_files_are_merged_and_its_large_ones_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past ``compact_after_files``, type 2's state has the small files later batches
    appended merged (each bucket's apart, as its layout wants), and the large files the
    first batch wrote are left as they are: the target is the same as without merging."""
    monkeypatch.setattr(iceberg_state, "SMALL_FILE_BYTES", 10_000)
    first = [Change((k,), (1,), "upsert", {"a": k, "b": "x" * 20}) for k in range(4_000)]
    later = [
        [Change((k,), (n,), "upsert", {"a": -k, "b": "y"}) for k in (n, n + 7, 5_000 + n)]
        for n in range(2, 12)
    ]
    found = []
    for compact in (2, 64):
        with tempfile.TemporaryDirectory() as folder:
            spec = spec_for(folder, 2, iceberg=True, key_buckets=2, compact_after_files=compact)
            apply_shares(spec, _shares(spec, first, 2), 0)
            state = _table(spec, spec.state)
            large = iceberg_tables.file_paths(state)
            assert all(t.file.file_size_in_bytes >= 10_000 for t in state.scan().plan_files())
            for version, part in enumerate(later, start=1):
                apply_shares(spec, _shares(spec, part, 2), version)
            state = _table(spec, spec.state)
            files = iceberg_tables.file_paths(state)
            if compact == 2:
                assert large <= files and len(files - large) <= 2 + 2  # a merged file a bucket
                _assert_laid_out(spec, 2)
            found.append(_rows(spec))
    assert found[0] == found[1]


def test_a_state_whose_partitioning_a_hand_changed_is_read_by_pyiceberg() -> None:
    """Files of an earlier partition spec hold other partition values than the current
    spec's: the state is then scanned by pyiceberg (which projects each spec), and the
    target stays the model's."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, iceberg=True, key_buckets=2)
        _first(spec)
        with _table(spec, spec.state).update_spec() as change:
            change.add_identity("__spark_cdc_op")
        apply_shares(spec, _shares(spec, LATER, 2), 1)
        state = _table(spec, spec.state)
        assert _described(state, spec) is None
        later = [Change((3,), (3,), "upsert", {"a": 33}), Change((8,), (3,), "delete")]
        apply_shares(spec, _shares(spec, later, 2), 2)
        want = {k: {"id": k, "a": k, "b": "x"} for k in range(20)}
        want.update({k: {"id": k, "a": -k, "b": "y"} for k in (3, 7, 30)})
        want[3] = {"id": 3, "a": 33, "b": None}
        del want[8]
        assert _rows(spec) == sorted_rows(pa.Table.from_pylist(list(want.values())))
