"""The server's apply step against the plain-Python model (tests/support/apply_model.py):
random feeds (late changes, deletes, truncates, duplicates, NULL updates), applied in random
order and random batches to real Delta tables, make the target the model makes of the whole
feed: whole rows and the schema. Applying a batch again changes nothing."""

from __future__ import annotations

import dataclasses
import itertools
import json
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given
from hypothesis import strategies as st
from spark_cdc.server_plugin.errors import ChangelogSourceError
from spark_cdc.server_plugin.sinks.apply.delta import state, tables
from spark_cdc.server_plugin.sinks.apply.delta.state import StateMemory
from spark_cdc.server_plugin.sinks.apply.engine.runs import ALIVE
from spark_cdc.server_plugin.sinks.apply.engine.spec import (
    BUCKET,
    END_AT,
    OP,
    START_AT,
    UPSERT,
    ApplySpec,
    sequence_column,
)
from spark_cdc.server_plugin.sinks.apply.task import apply_batch

from tests.support.apply_feeds import MODEL, batches, expected, feeds, target_schema
from tests.support.apply_model import Change, Conflict
from tests.support.apply_targets import (
    VALUES,
    applied_in_tasks,
    prepared,
    read_table,
    sorted_rows,
    spec_for,
)


def apply_all(
    spec: ApplySpec,
    parts: list[list[Change]],
    memory: StateMemory | None = None,
    tasks: int = 0,
    hashed: bool = False,
    spilled: bool = False,
) -> list[dict[str, Any]]:
    """Each part applied as a batch: resolved by the commit (from storage, or from the
    ``memory`` a stream's writer keeps), or by ``tasks`` tasks, each resolving the changes
    of its keys (as the client's plan partitions them: by the key's hash when ``hashed``,
    the batch then carrying it; ``spilled``: each task's share spilled in parts) before
    one commit of their shares."""
    for version, part in enumerate(parts):
        if tasks:
            applied_in_tasks(spec, part, version, tasks, hashed, spilled)
            continue
        apply_batch(spec, prepared(part, hashed), version, memory)
        if memory is not None and memory.rows is not None:
            assert _state_rows(memory.rows) == _state_rows(read_table(spec.state))
    table = read_table(spec.target)
    assert [(f.name, f.type) for f in table.schema] == target_schema(spec)
    return sorted_rows(table)


def _state_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """The state's rows as its files hold them (a bucketed state's partition column is
    not in them, and not in what a writer keeps in memory)."""
    if BUCKET in table.column_names:
        table = table.drop_columns([BUCKET])
    return sorted(tuple(map(repr, row.values())) for row in table.to_pylist())


# How a target is laid out: each of its write paths (files rewritten by a direct commit,
# one with a checkpoint after every commit, deletion vectors, delta-rs' MERGE for a table
# keeping a change data feed) and partitioned or not.
LAYOUTS = st.fixed_dictionaries(
    {
        "table_properties": st.sampled_from(
            [
                {},
                {"delta.checkpointInterval": "1"},
                {"delta.enableDeletionVectors": "true"},
                {"delta.enableChangeDataFeed": "true"},
            ]
        ),
        "partition_cols": st.sampled_from([(), ("b",)]),
    }
)


@MODEL
@given(
    data=st.data(),
    scd_type=st.sampled_from([1, 2]),
    ignore_nulls=st.booleans(),
    resolved_in=st.sampled_from(["commit", "memory", "tasks", "spilled tasks"]),
    layout=LAYOUTS,
    buckets=st.sampled_from([None, 1, 2, 3]),
)
def test_target_equals_the_model_of_the_whole_feed(
    data: st.DataObject,
    scd_type: int,
    ignore_nulls: bool,
    resolved_in: str,
    layout: dict,
    buckets: int | None,
) -> None:
    """Type 1's state compacted after every batch, or never; each batch resolved by the
    commit, its state read from storage or kept in memory as a stream's writer does (equal
    to the table after every batch), or by up to three tasks, each the changes of its keys
    (a feed with truncates is never split), whole or spilled in parts by key; the
    target written by each of its paths, partitioned or not; the state laid out in 1 to
    3 key buckets, as many as the tasks or not, or in none (a batch without key
    hashes)."""
    tasks = data.draw(st.integers(1, 3)) if resolved_in.endswith("tasks") else 0
    changes = data.draw(feeds(truncates=scd_type == 1 and not tasks))
    parts = data.draw(batches(changes))
    tracked = data.draw(st.sampled_from([VALUES, ("a",), ("b",)]))
    compact = data.draw(st.sampled_from([1, 64]))
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(
            folder,
            scd_type,
            ignore_null_updates=ignore_nulls,
            tracked=tracked,
            compact_after_files=compact,
            key_buckets=buckets or 0,
            **layout,
        )
        memory = StateMemory() if resolved_in == "memory" else None
        hashed = buckets is not None
        spilled = resolved_in == "spilled tasks"
        assert apply_all(spec, parts, memory, tasks, hashed, spilled) == expected(changes, spec)


@MODEL
@given(data=st.data(), scd_type=st.sampled_from([1, 2]), ignore_nulls=st.booleans())
def test_tasks_resolve_late_changes_against_the_state(
    data: st.DataObject, scd_type: int, ignore_nulls: bool
) -> None:
    """The tasks' path alone, where a share reads only the state files its changes can
    need (type 1 skips those whose changes all came before the share's): feeds split into
    batches so that changes arrive late, split among one to three tasks."""
    tasks = data.draw(st.integers(1, 3))
    changes = data.draw(feeds(truncates=False))
    parts = data.draw(batches(changes))
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type, ignore_null_updates=ignore_nulls)
        assert apply_all(spec, parts, None, tasks) == expected(changes, spec)


@MODEL
@given(
    data=st.data(),
    scd_type=st.sampled_from([1, 2]),
    resolved_in=st.sampled_from(["commit", "tasks", "spilled tasks"]),
    layout=LAYOUTS,
    buckets=st.sampled_from([None, 1, 3]),
)
def test_a_full_refresh_equals_the_model_of_its_feed_alone(
    data: st.DataObject, scd_type: int, resolved_in: str, layout: dict, buckets: int | None
) -> None:
    """Batches of one feed (or none: a refresh of a new target), then a full refresh with
    another feed, resolved by the commit or by one to three tasks (which stage both
    tables' files for the commit to name; whole or spilled in parts by key): the target
    is the model of the refresh's feed alone, with each write path and layout, and a
    batch after it applies on it."""
    hashed = buckets is not None
    before = data.draw(st.one_of(st.just([]), feeds(truncates=False)))
    parts = data.draw(batches(before)) if before else []
    again = data.draw(feeds(truncates=False))
    later = [  # after the refresh's feed: no change of a key at one of its sequences
        dataclasses.replace(c, sequence=(c.sequence[0] + 100,))
        for c in data.draw(feeds(truncates=False))
    ]
    tasks = data.draw(st.integers(1, 3)) if resolved_in.endswith("tasks") else 0
    spilled = resolved_in == "spilled tasks"
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type, key_buckets=buckets or 0, **layout)
        if parts:
            apply_all(spec, parts, None, 2, hashed)
        refresh = dataclasses.replace(spec, full_refresh=True, app_id="refresh-writer")
        rows = apply_all(refresh, [again], None, tasks, hashed, spilled)
        assert rows == expected(again, spec)
        then = dataclasses.replace(spec, app_id="refresh-writer")
        rows = apply_all(then, [again, later], None, tasks, hashed, spilled)
        assert rows == expected([*again, *later], spec)


@MODEL
@given(
    data=st.data(),
    ignore_nulls=st.booleans(),
    resolved_in=st.sampled_from(["commit", "tasks"]),
    tracked=st.sampled_from([VALUES, ("a",), ("b",)]),
)
def test_type_2_in_sequence_order_equals_the_model(
    data: st.DataObject, ignore_nulls: bool, resolved_in: str, tracked: tuple[str, ...]
) -> None:
    """A stream's usual feed: each batch's changes all come after what the state holds,
    so no key has a late change and a batch's versions are found without the stored runs
    (``history._changed_versions``): deletes, re-inserts, changes of untracked columns that
    continue a version and a change seen again (a new change at a stored one's sequence is
    that one, and takes the general path)."""
    changes = data.draw(feeds(truncates=False))
    ordered = sorted(changes, key=lambda c: c.sequence)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(ordered)), max_size=3)))
    bounds = [0, *cuts, len(ordered)]
    parts = [ordered[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    tasks = data.draw(st.integers(1, 3)) if resolved_in == "tasks" else 0
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 2, ignore_null_updates=ignore_nulls, tracked=tracked)
        assert apply_all(spec, parts, None, tasks) == expected(changes, spec)


@MODEL
@given(data=st.data(), scd_type=st.sampled_from([1, 2]))
def test_a_writer_remembering_the_state_notices_another_writers_commits(
    data: st.DataObject, scd_type: int
) -> None:
    """Two writers, each keeping the state in memory, take turns on one target: each
    finds the other's commits in the table, never serves its stale copy."""
    changes = data.draw(feeds(truncates=scd_type == 1))
    parts = data.draw(batches(changes))
    turns = data.draw(st.lists(st.booleans(), min_size=len(parts), max_size=len(parts)))
    layout = data.draw(LAYOUTS)
    with tempfile.TemporaryDirectory() as folder:
        writers = [
            (
                spec_for(folder, scd_type, app_id=f"writer-{i}", compact_after_files=2, **layout),
                StateMemory(),
            )
            for i in range(2)
        ]
        for version, (part, turn) in enumerate(zip(parts, turns, strict=True)):
            spec, memory = writers[turn]
            apply_batch(spec, prepared(part), version, memory)
        assert sorted_rows(read_table(spec.target)) == expected(changes, spec)


@pytest.mark.parametrize("scd_type", [1, 2])
def test_a_remembered_state_is_not_served_after_another_writers_commit(scd_type: int) -> None:
    """Writer A remembers key 1 at sequence 5; writer B applies it at 9; A's change at 7
    is then late (type 1: ignored), which only the table's state tells A."""
    parts = [
        [Change((1,), (5,), "upsert", {"a": 1, "b": "x"})],
        [Change((1,), (9,), "upsert", {"a": 2, "b": "y"})],
        [Change((1,), (7,), "upsert", {"a": 3, "b": "z"})],
    ]
    with tempfile.TemporaryDirectory() as folder:
        a, b = (spec_for(folder, scd_type, app_id=name) for name in ("writer-a", "writer-b"))
        memory = StateMemory()
        apply_batch(a, prepared(parts[0]), 0, memory)
        apply_batch(b, prepared(parts[1]), 0, StateMemory())
        apply_batch(a, prepared(parts[2]), 1, memory)
        assert memory.rows is not None
        assert _state_rows(memory.rows) == _state_rows(read_table(a.state))
        feed = [c for part in parts for c in part]
        assert sorted_rows(read_table(a.target)) == expected(feed, a)


def test_a_remembered_state_is_dropped_when_another_commit_comes_before_its_append() -> None:
    """The append lands after another writer's commit: the copy would miss that commit,
    so it is dropped, and the next batch reads the table."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1)
        memory = StateMemory()
        apply_batch(spec, prepared([Change((1,), (5,), "upsert", {"a": 1, "b": "x"})]), 0, memory)
        table = DeltaTable(spec.state)  # as this writer opened it
        assert memory.holds(table, table.version())
        rows = memory.rows
        assert rows is not None
        write_deltalake(spec.state, rows.slice(0, 1), mode="append")  # another writer
        state.append(table, spec, 1, rows.slice(0, 1), memory)
        assert memory.rows is None


@MODEL
@given(data=st.data(), scd_type=st.sampled_from([1, 2]))
def test_a_batch_applied_again_changes_nothing(data: st.DataObject, scd_type: int) -> None:
    """The last batch again under its own marker (a restarted stream runs it again:
    skipped), or any batch under another writer's (the same changes seen twice: each is
    one change)."""
    changes = data.draw(feeds(truncates=False))
    parts = data.draw(batches(changes))
    again = data.draw(st.integers(0, len(parts) - 1))
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type)
        before = apply_all(spec, parts)
        assert apply_batch(spec, prepared(parts[-1]), len(parts) - 1).skipped
        other = spec_for(folder, scd_type, app_id="another-writer")
        assert not apply_batch(other, prepared(parts[again]), 0).skipped
        assert sorted_rows(read_table(spec.target)) == before == expected(changes, spec)


@MODEL
@given(data=st.data(), scd_type=st.sampled_from([1, 2]))
def test_a_changelog_update_is_its_delete_and_insert(data: st.DataObject, scd_type: int) -> None:
    """A feed without update detection holds an update as a delete and an insert of one
    key at one commit version: applied as the update, in any order and batches."""
    changes = data.draw(feeds(truncates=False))
    halves = [Change(c.key, c.sequence, "delete") for c in changes if c.kind == "upsert"]
    chosen = data.draw(st.lists(st.sampled_from(halves), max_size=4)) if halves else []
    feed = changes + chosen
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type, changelog_pairs=True)
        assert apply_all(spec, data.draw(batches(feed))) == expected(feed, spec)


@MODEL
@given(data=st.data(), ignore_nulls=st.booleans())
def test_type_1_refuses_two_changes_at_one_sequence_when_their_order_decides(
    data: st.DataObject, ignore_nulls: bool
) -> None:
    """Type 1 refuses two changes at one sequence exactly when their order would change
    the target as it stands after the batch (the model of the changes applied so far
    tries every order; a later change may shadow them, but the batch cannot know it),
    however the feed is split and the state compacted, and applies the others."""
    changes = data.draw(feeds(truncates=True, conflicts=True))
    parts = data.draw(batches(changes))
    compact = data.draw(st.sampled_from([1, 64]))
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, ignore_null_updates=ignore_nulls, compact_after_files=compact)
        applied: list[Change] = []
        for version, part in enumerate(parts):
            applied += part
            try:
                want = expected(applied, spec)
            except Conflict:
                with pytest.raises(ChangelogSourceError) as refused:
                    apply_batch(spec, prepared(part), version)
                assert refused.value.condition == "APPLY_CHANGES.DUPLICATE_SEQUENCE"
                return
            apply_batch(spec, prepared(part), version)
            assert sorted_rows(read_table(spec.target)) == want


@pytest.mark.parametrize("scd_type", [1, 2])
@pytest.mark.parametrize("split", [False, True])
def test_two_changes_of_a_key_at_one_sequence_are_refused(scd_type: int, split: bool) -> None:
    first = Change((1,), (5,), "upsert", {"a": 1, "b": "x"})
    second = Change((1,), (5,), "upsert", {"a": 2, "b": "x"})
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type)
        parts = [[first], [second]] if split else [[first, second]]
        with pytest.raises(ChangelogSourceError) as refused:
            apply_all(spec, parts)
    assert refused.value.condition == "APPLY_CHANGES.DUPLICATE_SEQUENCE"
    assert refused.value.parameters == {"key": "id=1", "sequence": "seq=5"}


def test_a_late_change_before_a_delete_does_not_fill_the_nulls_after_it() -> None:
    """With ignore_null_updates, a NULL keeps the value the key had just before: after a
    delete, none, also when a change older than the delete arrives later."""
    first = [
        Change((1,), (10,), "delete"),
        Change((1,), (20,), "upsert", {"a": None, "b": "x"}),
    ]
    late = [Change((1,), (5,), "upsert", {"a": 3, "b": "y"})]
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, ignore_null_updates=True)
        assert apply_all(spec, [first, late]) == [{"id": 1, "a": None, "b": "x"}]
        assert expected(first + late, spec) == [{"id": 1, "a": None, "b": "x"}]


def test_a_sequence_without_an_order_is_refused() -> None:
    batch = prepared([Change((1,), (5,), "upsert", {"a": 1, "b": "x"})])
    batch = batch.set_column(3, sequence_column(0), pa.array([[5]], pa.list_(pa.int64())))
    with tempfile.TemporaryDirectory() as folder, pytest.raises(ChangelogSourceError) as refused:
        apply_batch(spec_for(folder, 1), batch, 0)
    assert refused.value.condition == "APPLY_CHANGES.NON_ORDERABLE_SEQUENCE"
    assert refused.value.parameters == {"column": "seq", "dataType": "list<item: int64>"}


def test_a_commit_that_loses_a_race_with_another_writer_is_refused_whole() -> None:
    """Another writer rewrites the target's file after this one read the table: delta-rs
    finds the conflict at commit, which is refused by name with nothing of it written."""
    first = [Change((1,), (5,), "upsert", {"a": 1, "b": "x"})]
    first += [Change((2,), (5,), "upsert", {"a": 2, "b": "y"})]
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1)
        apply_batch(spec, prepared(first), 0)
        ours = DeltaTable(spec.target)  # as this writer opened it for the next batch
        DeltaTable(spec.target).delete("id = 2")  # the other writer
        rows = pa.table({"id": [1], "a": [7], "b": ["z"], ALIVE: [True]})
        with pytest.raises(ChangelogSourceError) as refused:
            tables.upsert_rows(ours, spec, 1, rows)
        assert refused.value.condition == "APPLY_CHANGES.CONCURRENT_WRITE"
        table = DeltaTable(spec.target)
        assert table.transaction_version(spec.app_id) == 0
        assert sorted_rows(read_table(spec.target)) == [{"id": 1, "a": 1, "b": "x"}]


@pytest.mark.parametrize("retention_ms", [None, 0])
def test_tombstones_are_forgotten_after_their_retention(retention_ms: int | None) -> None:
    """A deleted key's sequence is remembered (a change older than the delete arriving
    later is ignored) until the state is compacted past the retention; then that late
    change is applied, as the documentation says."""
    feed = [[Change((1,), (5,), "upsert", {"a": 1, "b": "x"}), Change((1,), (9,), "delete")]]
    late = [[Change((1,), (7,), "upsert", {"a": 2, "b": "late"})]]
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, compact_after_files=1)
        spec = dataclasses.replace(spec, tombstone_retention_ms=retention_ms)
        got = apply_all(spec, [*feed, [Change((2,), (1,), "upsert", {"a": 0, "b": "y"})]])
        assert got == [{"id": 2, "a": 0, "b": "y"}]
        for version, part in enumerate(late, start=2):
            apply_batch(spec, prepared(part), version)
        rows = sorted_rows(read_table(spec.target))
    forgotten = [{"id": 1, "a": 2, "b": "late"}] if retention_ms == 0 else []
    assert rows == [*forgotten, {"id": 2, "a": 0, "b": "y"}]


@pytest.mark.parametrize("compact", [1, 64])
def test_a_truncate_outlives_compaction(compact: int) -> None:
    """A truncate deletes every key at its sequence, also for changes below it that
    arrive after the state was compacted."""
    parts = [
        [Change((1,), (2,), "upsert", {"a": 1, "b": "x"})],
        [Change((None,), (5,), "truncate"), Change((2,), (6,), "upsert", {"a": 2, "b": "y"})],
        [Change((3,), (7,), "upsert", {"a": 3, "b": "z"})],  # a second file: compacted
        [Change((4,), (4,), "upsert", {"a": 4, "b": "w"})],
    ]
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, compact_after_files=compact)
        assert apply_all(spec, parts) == [
            {"id": 2, "a": 2, "b": "y"},
            {"id": 3, "a": 3, "b": "z"},
        ]


def _hand_written_table(path: Path, writer_features: list[str]) -> None:
    """A Delta table with ``writer_features``, its log written by hand (delta-rs cannot
    create them), schema ``id long, a long, b string``."""
    schema = {
        "type": "struct",
        "fields": [
            {"name": n, "type": t, "nullable": True, "metadata": {}}
            for n, t in (("id", "long"), ("a", "long"), ("b", "string"))
        ],
    }
    actions = [
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": [],
                "writerFeatures": writer_features,
            }
        },
        {
            "metaData": {
                "id": "bench-0000",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": [],
                "configuration": {},
                "createdTime": 0,
            }
        },
    ]
    (path / "_delta_log").mkdir(parents=True)
    text = "\n".join(json.dumps(a) for a in actions) + "\n"
    (path / "_delta_log" / f"{0:020d}.json").write_text(text)


def _refusal(spec: ApplySpec) -> ChangelogSourceError:
    with pytest.raises(ChangelogSourceError) as refused:
        apply_batch(spec, prepared([Change((1,), (5,), "upsert", {"a": 1, "b": "x"})]), 0)
    return refused.value


def test_a_target_with_features_delta_rs_cannot_write_is_refused_before_writing() -> None:
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1)
        _hand_written_table(Path(spec.target), ["rowTracking", "domainMetadata", "appendOnly"])
        refused = _refusal(spec)
        assert sorted(p.name for p in (Path(spec.target) / "_delta_log").iterdir()) == [
            f"{0:020d}.json"
        ]
    assert refused.condition == "APPLY_CHANGES.UNSUPPORTED_TARGET_FEATURE"
    assert refused.parameters["features"] == "domainMetadata, rowTracking"


@pytest.mark.parametrize(
    ("columns", "problem"),
    [
        ({"id": pa.int64(), "a": pa.string(), "b": pa.string()}, "columns of another type: a"),
        (
            {"id": pa.int64(), "a": pa.int64(), "b": pa.string(), "c": pa.int32()},
            "not in the feed: c",
        ),
    ],
)
def test_a_target_that_does_not_fit_the_feed_is_refused(
    columns: dict[str, pa.DataType], problem: str
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1)
        write_deltalake(spec.target, pa.schema(list(columns.items())).empty_table())
        refused = _refusal(spec)
        assert DeltaTable(spec.target).version() == 0
    assert refused.condition == "APPLY_CHANGES.TARGET_SCHEMA_MISMATCH"
    assert problem in refused.parameters["problem"]


def test_an_append_only_target_is_refused() -> None:
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1)
        empty = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("b", pa.string())]).empty_table()
        write_deltalake(spec.target, empty, configuration={"delta.appendOnly": "true"})
        assert _refusal(spec).condition == "APPLY_CHANGES.APPEND_ONLY_TARGET"


def test_a_replaced_checkpoint_is_refused_not_skipped() -> None:
    """A stream whose checkpoint was deleted numbers its batches from 0 again: skipping
    them as applied would lose their changes."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1)
        for version in range(3):
            part = [Change((version,), (version,), "upsert", {"a": version, "b": "x"})]
            apply_batch(spec, prepared(part), version)
        refused = _refusal(spec)  # batch 0 again
    assert refused.condition == "APPLY_CHANGES.CHECKPOINT_REPLACED"
    assert refused.parameters == {"path": spec.target, "last": "2", "batch": "0"}


def test_a_struct_sequence_is_its_fields_compared_in_order() -> None:
    """Databricks orders by several columns with ``sequence_by=struct(a, b)``: the fields
    are compared in order, and type 2's bounds are structs of them."""
    ids, majors, minors = [1, 1, 1], [1, 2, 1], [5, 0, 9]
    batch = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "a": pa.array([10, 20, 15], pa.int64()),
            "b": pa.array(["x", "y", "z"]),
            sequence_column(0): pa.StructArray.from_arrays(
                [pa.array(majors, pa.int64()), pa.array(minors, pa.int64())],
                names=["major", "minor"],
            ),
            OP: pa.array([UPSERT] * 3, pa.int8()),
        }
    )
    with tempfile.TemporaryDirectory() as folder:
        spec = dataclasses.replace(spec_for(folder, 2), sequence_names=("sequence",))
        apply_batch(spec, batch, 0)
        rows = sorted_rows(read_table(spec.target))
    at = [{"major": 1, "minor": 5}, {"major": 1, "minor": 9}, {"major": 2, "minor": 0}]
    assert rows == sorted_rows(
        pa.Table.from_pylist(
            [
                {"id": 1, "a": 10, "b": "x", START_AT: at[0], END_AT: at[1]},
                {"id": 1, "a": 15, "b": "z", START_AT: at[1], END_AT: at[2]},
                {"id": 1, "a": 20, "b": "y", START_AT: at[2], END_AT: None},
            ]
        )
    )
