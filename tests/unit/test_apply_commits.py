"""What a batch commits, on real Delta tables (the engine alone, no Spark): a refused batch
nothing at all (no commit, and no folder where there was no table), a batch that changes
nothing in the target no target commit (the state's commit records it, with what it did),
a target of the other SCD type is named as such, and shares that tasks resolved against a
state another writer has since changed are refused whole."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from spark_cdc.server_plugin.errors import ChangelogSourceError
from spark_cdc.server_plugin.sinks.apply.delta import staging, tables
from spark_cdc.server_plugin.sinks.apply.engine.spec import ApplySpec, sequence_column
from spark_cdc.server_plugin.sinks.apply.task import apply_batch, apply_shares, resolve_share

from tests.support.apply_model import Change
from tests.support.apply_targets import prepared, read_table, sorted_rows, spec_for

FIRST = [Change((1,), (5,), "upsert", {"a": 1, "b": "x"})]
Refused = Callable[[ApplySpec], tuple[ApplySpec, pa.Table, int]]


def _null_sequence(spec: ApplySpec) -> tuple[ApplySpec, pa.Table, int]:
    batch = prepared([Change((2,), (6,), "upsert", {"a": 2, "b": "y"})])
    return spec, batch.set_column(3, sequence_column(0), pa.nulls(1, pa.int64())), 1


def _null_key(spec: ApplySpec) -> tuple[ApplySpec, pa.Table, int]:
    return spec, prepared([Change((None,), (6,), "upsert", {"a": 2, "b": "y"})]), 1


def _unordered_sequence(spec: ApplySpec) -> tuple[ApplySpec, pa.Table, int]:
    batch = prepared([Change((2,), (6,), "upsert", {"a": 2, "b": "y"})])
    return spec, batch.set_column(3, sequence_column(0), pa.array([[6]])), 1


def _duplicate_sequence(spec: ApplySpec) -> tuple[ApplySpec, pa.Table, int]:
    twice = [Change((2,), (6,), "upsert", {"a": v, "b": "y"}) for v in (2, 3)]
    return spec, prepared(twice), 1


def _new_column(spec: ApplySpec) -> tuple[ApplySpec, pa.Table, int]:
    batch = prepared([Change((2,), (6,), "upsert", {"a": 2, "b": "y"})])
    wider = batch.add_column(3, "c", pa.array([1]))
    return ApplySpec(**{**spec.__dict__, "columns": (*spec.columns, "c")}), wider, 1


REFUSALS: dict[str, tuple[Refused, bool]] = {  # condition: (the batch, refused with no table)
    "APPLY_CHANGES.NULL_SEQUENCE": (_null_sequence, True),
    "APPLY_CHANGES.NULL_KEY": (_null_key, True),
    "APPLY_CHANGES.NON_ORDERABLE_SEQUENCE": (_unordered_sequence, True),
    "APPLY_CHANGES.DUPLICATE_SEQUENCE": (_duplicate_sequence, True),
    "APPLY_CHANGES.NEW_COLUMNS": (_new_column, False),
    "APPLY_CHANGES.CHECKPOINT_REPLACED": (lambda spec: (spec, prepared(FIRST), -1), False),
}


@pytest.fixture(params=[False, True], ids=["resolved by the commit", "resolved in a task"])
def in_tasks(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def _applied(spec: ApplySpec, batch: pa.Table, version: int, in_tasks: bool) -> None:
    """``batch`` applied as the commit resolves it, or as a task's share: every refusal
    comes before anything is written either way."""
    if in_tasks:
        apply_shares(spec, [resolve_share(spec, batch)], version)
    else:
        apply_batch(spec, batch, version)


def _data_files(folder: str) -> set[str]:
    """Every file of the tables in ``folder`` but their logs: a batch's files written
    (staged by its tasks) and not committed would show here."""
    return {
        str(p.relative_to(folder))
        for p in Path(folder).rglob("*")
        if p.is_file() and "_delta_log" not in p.parts
    }


def _versions(spec: ApplySpec) -> tuple[int | None, int | None]:
    found = (
        DeltaTable(p).version() if Path(p).exists() else None for p in (spec.target, spec.state)
    )
    return (next(found), next(found))


@pytest.mark.parametrize("scd_type", [1, 2])
@pytest.mark.parametrize("condition", sorted(REFUSALS))
def test_a_refused_batch_writes_nothing(condition: str, scd_type: int, in_tasks: bool) -> None:
    make, without_tables = REFUSALS[condition]
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type)
        if without_tables:  # the first batch of a new target: no folder is made
            refused_spec, batch, _ = make(spec)
            with pytest.raises(ChangelogSourceError) as refused:
                _applied(refused_spec, batch, 0, in_tasks)
            assert refused.value.condition == condition
            assert sorted(p.name for p in Path(folder).iterdir()) == []
        apply_batch(spec, prepared(FIRST), 0)
        before, rows, files = _versions(spec), read_table(spec.target), _data_files(folder)
        refused_spec, batch, version = make(spec)
        with pytest.raises(ChangelogSourceError) as refused:
            _applied(refused_spec, batch, version, in_tasks)
        assert refused.value.condition == condition
        assert _versions(spec) == before  # no commit to the target or the state
        assert read_table(spec.target) == rows
        assert _data_files(folder) == files  # nothing a task staged is left


@pytest.mark.parametrize("scd_type", [1, 2])
def test_a_batch_that_changes_nothing_commits_nothing_to_the_target(
    scd_type: int, in_tasks: bool
) -> None:
    """The same changes again under another writer (a batch DataFrame applied twice): the
    target stays at its version; the state's commit records the batch and its outcome
    (with the tasks that resolved it: 0, the commit did)."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type)
        apply_batch(spec, prepared(FIRST), 0)
        target, state = _versions(spec)
        again = spec_for(folder, scd_type, app_id="another-writer")
        if in_tasks:
            outcome = apply_shares(again, [resolve_share(again, prepared(FIRST))], 0)
        else:
            outcome = apply_batch(again, prepared(FIRST), 0)
        assert (outcome.changes, outcome.keys, outcome.rows) == (1, 0, 0)
        assert _versions(spec) == (target, (state or 0) + 1)
        recorded = DeltaTable(spec.state).history(1)[0][tables.OUTCOME_KEY]
        assert json.loads(recorded) == {
            "app_id": "another-writer",
            "batch": 0,
            "changes": 1,
            "keys": 0,
            "rows": 0,
            "skipped": False,
            "tasks": int(in_tasks),
            "target": [DeltaTable(spec.target).metadata().id, target],  # what it describes
        }
        # A run again after a stop between the two commits changes nothing either.
        assert apply_batch(again, prepared(FIRST), 0).skipped


@pytest.mark.parametrize("scd_type", [1, 2])
def test_a_first_batch_that_changes_nothing_still_makes_the_target(scd_type: int) -> None:
    """A delete of a key never seen: the target exists afterwards, empty, with its schema."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type)
        apply_batch(spec, prepared([Change((1,), (5,), "delete")]), 0)
        target = read_table(spec.target)
        assert target.num_rows == 0
        assert target.schema.names == [
            *spec.columns,
            *(("__START_AT", "__END_AT") * (scd_type - 1)),
        ]
        assert DeltaTable(spec.target).version() == 0


@pytest.mark.parametrize(("stored", "asked"), [(1, 2), (2, 1)])
def test_a_target_of_the_other_scd_type_is_named_as_such(
    stored: int, asked: int, in_tasks: bool
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        apply_batch(spec_for(folder, stored), prepared(FIRST), 0)
        before = _versions(spec_for(folder, stored))
        with pytest.raises(ChangelogSourceError) as refused:
            _applied(spec_for(folder, asked, app_id="other"), prepared(FIRST), 0, in_tasks)
        assert _versions(spec_for(folder, stored)) == before
    assert refused.value.condition == "APPLY_CHANGES.SCD_TYPE_MISMATCH"
    assert refused.value.parameters["stored"] == str(stored)
    assert refused.value.parameters["asked"] == str(asked)
    assert f"stored_as_scd_type={stored}" in str(refused.value)


def test_a_lost_race_to_make_the_target_is_a_concurrent_write() -> None:
    """Another writer made the table between this batch's look and its first commit."""
    schema = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("b", pa.string())])
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1)
        write_deltalake(spec.target, schema.empty_table())
        with pytest.raises(ChangelogSourceError) as refused:
            tables.created(spec.target, schema, spec, 0, schema.empty_table())
        assert DeltaTable(spec.target).version() == 0
    assert refused.value.condition == "APPLY_CHANGES.CONCURRENT_WRITE"


def test_a_batch_of_only_stale_changes_leaves_the_target_as_it_was() -> None:
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1)
        apply_batch(spec, prepared(FIRST), 0)
        stale = [Change((1,), (4,), "upsert", {"a": 9, "b": "old"})]
        assert apply_batch(spec, prepared(stale), 1).keys == 0
        assert sorted_rows(read_table(spec.target)) == [{"id": 1, "a": 1, "b": "x"}]
        assert DeltaTable(spec.target).version() == 0


def test_shares_resolved_before_another_writers_state_commit_are_refused_whole() -> None:
    """A task resolved its keys against the state at one version; another writer's batch
    committed before this batch's commit: the share may miss that writer's changes, so
    nothing of the batch is written."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1)
        apply_batch(spec, prepared(FIRST), 0)
        share = resolve_share(spec, prepared([Change((1,), (7,), "upsert", {"a": 7, "b": "z"})]))
        other = spec_for(folder, 1, app_id="another-writer")
        apply_batch(other, prepared([Change((1,), (9,), "upsert", {"a": 9, "b": "y"})]), 0)
        before, files = _versions(spec), _data_files(folder)
        assert share.staged.target and share.staged.state  # written by the task
        with pytest.raises(ChangelogSourceError) as refused:
            apply_shares(spec, [share], 1)
        assert _versions(spec) == before
        assert sorted_rows(read_table(spec.target)) == [{"id": 1, "a": 9, "b": "y"}]
        assert len(files - _data_files(folder)) == 2  # the task's two files, deleted
    assert refused.value.condition == "APPLY_CHANGES.CONCURRENT_WRITE"


def test_a_batch_that_fails_after_its_target_commit_keeps_the_targets_files(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The state's commit fails after the target's (storage gone): the files the tasks
    staged into the target are the target's now and stay (the target reads whole); the
    state's, which no commit names, are deleted; the batch run again completes it."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 2)
        apply_batch(spec, prepared(FIRST), 0)
        later = [Change((1,), (7,), "upsert", {"a": 7, "b": "z"})]
        share = resolve_share(spec, prepared(later))
        assert share.staged.target and share.staged.state

        def unwritable(*_: Any, **__: Any) -> None:
            raise OSError("the state's storage is gone")

        monkeypatch.setattr(staging, "append_staged", unwritable)
        with pytest.raises(OSError):
            apply_shares(spec, [share], 1)
        monkeypatch.undo()
        rows = sorted_rows(read_table(spec.target))  # every file it names is there
        assert [r["a"] for r in rows] == [1, 7]
        state_files = {
            Path(folder, "target__apply_changes_state", a["path"]) for a in share.staged.state
        }
        assert not any(p.exists() for p in state_files)
        apply_shares(spec, [resolve_share(spec, prepared(later))], 1)
        assert sorted_rows(read_table(spec.target)) == rows
        assert DeltaTable(spec.state).transaction_version(spec.app_id) == 1


@pytest.mark.parametrize("compact", [1, 64])
def test_a_share_resolves_against_the_states_truncate(compact: int) -> None:
    """A truncate the state keeps (from a feed resolved by the commit) drops a change a
    task resolves later when its sequence is not after it; a later one is applied."""
    first = [
        *FIRST,
        Change((2,), (5,), "upsert", {"a": 2, "b": "x"}),
        Change((None,), (8,), "truncate"),
    ]
    late = [
        Change((1,), (7,), "upsert", {"a": 7, "b": "old"}),
        Change((2,), (9,), "upsert", {"a": 9, "b": "new"}),
    ]
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, compact_after_files=compact)
        apply_batch(spec, prepared(first), 0)
        apply_shares(spec, [resolve_share(spec, prepared(late))], 1)
        assert sorted_rows(read_table(spec.target)) == [{"id": 2, "a": 9, "b": "new"}]


@pytest.mark.parametrize("scd_type", [1, 2])
def test_the_states_small_files_stay_few_over_a_long_stream(scd_type: int) -> None:
    """Each batch appends a file to the state; past ``compact_after_files`` small ones
    they are compacted (type 2's merged), so finding a batch's keys does not slow with the
    stream's age, and the target is what the same stream makes with no compaction. A
    compaction keeps the writer's marker: a batch run again after it is found applied."""
    parts = [
        [Change((v % 5,), (v,), "upsert", {"a": v, "b": "x"}), Change((7,), (v,), "delete")]
        for v in range(12)
    ]
    with tempfile.TemporaryDirectory() as folder:
        compacted, plain = (
            spec_for(f"{folder}/{name}", scd_type, compact_after_files=files)
            for name, files in (("compacted", 3), ("plain", 64))
        )
        for version, part in enumerate(parts):
            for spec in (compacted, plain):
                apply_batch(spec, prepared(part), version)
            assert tables.small_file_count(DeltaTable(compacted.state)) <= 3
        assert tables.small_file_count(DeltaTable(plain.state)) == len(parts)
        before = _versions(compacted)
        assert apply_batch(compacted, prepared(parts[-1]), len(parts) - 1).skipped
        assert _versions(compacted) == before
        assert sorted_rows(read_table(compacted.target)) == sorted_rows(read_table(plain.target))


def test_a_share_after_everything_stored_reads_no_state_file() -> None:
    """Type 1: a share whose changes all follow the state's (a stream of growing
    sequences) resolves without reading a state file (none is indexed), and applies as
    if it had; a share with a late change reads the file holding its key, and the late
    change loses to the stored one."""
    from spark_cdc.server_plugin.sinks.apply.engine import state_rows as state

    stored = [Change((k,), (5,), "upsert", {"a": k, "b": "x"}) for k in (1, 2, 3)]
    later = [Change((1,), (6,), "delete"), Change((2,), (7,), "upsert", {"a": 9, "b": "y"})]
    late = [Change((3,), (4,), "upsert", {"a": 0, "b": "old"})]
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1)
        apply_batch(spec, prepared(stored), 0)
        indexed = len(state._STATE_KEYS._kept)
        apply_shares(spec, [resolve_share(spec, prepared(later))], 1)
        assert len(state._STATE_KEYS._kept) == indexed
        apply_shares(spec, [resolve_share(spec, prepared(late))], 2)
        assert len(state._STATE_KEYS._kept) > indexed
        assert sorted_rows(read_table(spec.target)) == [
            {"id": 2, "a": 9, "b": "y"},
            {"id": 3, "a": 3, "b": "x"},
        ]


@pytest.mark.parametrize("scd_type", [1, 2])
def test_tasks_write_their_rows_and_the_commit_names_them(scd_type: int) -> None:
    """On local tables, a task writes the target's new rows and the state's into the
    tables' folders; only their add actions travel, and the commit names them. A batch
    found applied already (run again) deletes what its tasks wrote again."""
    later = [Change((1,), (7,), "upsert", {"a": 7, "b": "z"}), Change((2,), (7,), "delete")]
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type)
        apply_batch(spec, prepared([*FIRST, Change((2,), (5,), "upsert", {"a": 2, "b": "x"})]), 0)
        share = resolve_share(spec, prepared(later))
        again = resolve_share(spec, prepared(later))  # the same batch, run twice
        assert share.staged.target and share.staged.state
        assert not share.resolution.rows.num_rows and not share.resolution.state.num_rows
        staged = {f"target/{a['path']}" for a in share.staged.target}
        assert staged <= _data_files(folder)
        assert apply_shares(spec, [share], 1).rows == (1 if scd_type == 1 else 3)
        rows = [{"id": 1, "a": 7, "b": "z"}]
        if scd_type == 2:
            rows = [
                {"id": 1, "a": 1, "b": "x", "__START_AT": 5, "__END_AT": 7},
                {"id": 1, "a": 7, "b": "z", "__START_AT": 7, "__END_AT": None},
                {"id": 2, "a": 2, "b": "x", "__START_AT": 5, "__END_AT": 7},
            ]
        assert sorted_rows(read_table(spec.target)) == sorted_rows(pa.Table.from_pylist(rows))
        files = _data_files(folder)
        assert apply_shares(spec, [again], 1).skipped
        discarded = {f"target/{a['path']}" for a in again.staged.target}
        discarded |= {f"target__apply_changes_state/{a['path']}" for a in again.staged.state}
        assert _data_files(folder) == files - discarded


@pytest.mark.parametrize("properties", [{}, {"delta.enableDeletionVectors": "true"}])
def test_a_null_for_a_not_null_column_is_refused_by_name(properties: dict, in_tasks: bool) -> None:
    """A target that declares a column NOT NULL gets no NULL in it: the batch is refused
    before anything is written, naming the column (delta-rs' MERGE said only that rows
    failed a validation check)."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1)
        schema = pa.schema(
            [
                pa.field("id", pa.int64(), False),
                pa.field("a", pa.int64(), False),
                ("b", pa.string()),
            ]
        )
        write_deltalake(
            spec.target, pa.table([[1], [1], ["x"]], schema=schema), configuration=properties
        )
        before, files = DeltaTable(spec.target).version(), _data_files(folder)
        batch = prepared([Change((2,), (6,), "upsert", {"a": None, "b": "y"})])
        with pytest.raises(ChangelogSourceError) as refused:
            _applied(spec, batch, 0, in_tasks)
        assert refused.value.condition == "APPLY_CHANGES.NOT_NULL_CONSTRAINT_VIOLATED"
        assert "Column a is NOT NULL" in str(refused.value)
        assert DeltaTable(spec.target).version() == before and _data_files(folder) == files
