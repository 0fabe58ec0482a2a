"""A target and its state touched by hand between two batches (``sinks.apply.binding``),
on real Delta tables written by the engine and by delta-rs as a user would: what is
refused is refused by name with nothing written, what is another writer's ordinary work
is applied exactly, and a full refresh rebuilds both from the feed's start."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchTableError
from spark_cdc.server_plugin.errors import ChangelogSourceError
from spark_cdc.server_plugin.iceberg.table import LEGACY_CATALOG_NAME, catalog_from
from spark_cdc.server_plugin.sinks.apply import checkpoints, sink
from spark_cdc.server_plugin.sinks.apply.engine.binding import REFRESH
from spark_cdc.server_plugin.sinks.apply.engine.spec import ApplySpec
from spark_cdc.server_plugin.sinks.apply.task import apply_batch
from spark_cdc.server_plugin.sinks.apply.task import apply_batch as apply_iceberg

from tests.support.apply_feeds import MODEL, batches, expected, feeds
from tests.support.apply_model import Change
from tests.support.apply_targets import (
    iceberg_catalog,
    prepared,
    read_iceberg,
    read_table,
    sorted_rows,
    spec_for,
)

FIRST = [Change((k,), (1,), "upsert", {"a": k, "b": "x"}) for k in range(1, 6)]
SECOND = [Change((1,), (2,), "upsert", {"a": 10, "b": "y"}), Change((6,), (2,), "upsert", {"a": 6})]
LATE = [Change((2,), (0,), "upsert", {"a": 99, "b": "late"}), Change((3,), (3,), "delete")]


def _versions(spec: ApplySpec) -> tuple[int | None, int | None]:
    """Each table's version (None: no table at its path)."""
    return tuple(  # type: ignore[return-value]
        DeltaTable(p).version() if DeltaTable.is_deltatable(p) else None
        for p in (spec.target, spec.state)
    )


def _refused(spec: ApplySpec, changes: list[Change], version: int) -> ChangelogSourceError:
    """The batch refused, with neither table changed (no commit, no folder made)."""
    before = _versions(spec)
    with pytest.raises(ChangelogSourceError) as refused:
        apply_batch(spec, prepared(changes), version)
    assert _versions(spec) == before
    return refused.value


def _refresh(spec: ApplySpec) -> ApplySpec:
    return dataclasses.replace(spec, full_refresh=True, app_id="refresh-writer")


@pytest.mark.parametrize("scd_type", [1, 2])
def test_a_deleted_target_whose_state_has_history_is_refused(scd_type: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type)
        apply_batch(spec, prepared(FIRST), 0)
        shutil.rmtree(spec.target)
        refused = _refused(spec, SECOND, 1)
        assert not Path(spec.target).exists()
    assert refused.condition == "APPLY_CHANGES.TARGET_MISSING"
    assert refused.parameters == {"target": spec.target, "state": spec.state}
    assert "full_refresh=True" in str(refused)


@pytest.mark.parametrize("scd_type", [1, 2])
def test_a_target_whose_state_is_deleted_is_refused(scd_type: int) -> None:
    """Even a mirror: rebuilt from its target, a late change of key 2 would win over the
    target's newer row, and the deleted key 3 would come back with a late insert."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type)
        apply_batch(spec, prepared(FIRST), 0)
        apply_batch(spec, prepared(LATE[1:]), 1)
        shutil.rmtree(spec.state)
        refused = _refused(spec, [*LATE[:1], Change((3,), (2,), "upsert", {"a": 3})], 2)
        assert not Path(spec.state).exists()
    assert refused.condition == "APPLY_CHANGES.STATE_MISSING"
    assert refused.parameters["evidence"] == "batch 1 of writer test-writer"


@pytest.mark.parametrize("scd_type", [1, 2])
def test_a_batch_whose_state_commit_never_came_is_applied_to_the_state_alone(
    scd_type: int,
) -> None:
    """The first batch stopped between its two commits (the target's made, the state's
    not): run again, it is no missing state but the state's commit still to make."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type)
        apply_batch(spec, prepared(FIRST), 0)
        shutil.rmtree(spec.state)
        target_version = DeltaTable(spec.target).version()
        apply_batch(spec, prepared(FIRST), 0)
        assert DeltaTable(spec.target).version() == target_version
        apply_batch(spec, prepared(SECOND), 1)
        assert sorted_rows(read_table(spec.target)) == expected([*FIRST, *SECOND], spec)


@pytest.mark.parametrize("scd_type", [1, 2])
def test_another_table_at_the_targets_path_is_refused(scd_type: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type)
        apply_batch(spec, prepared(FIRST), 0)
        stranger = read_table(spec.target)
        shutil.rmtree(spec.target)
        write_deltalake(spec.target, stranger)  # same columns, a table of its own
        refused = _refused(spec, SECOND, 1)
    assert refused.condition == "APPLY_CHANGES.TARGET_REPLACED"
    assert "the state describes" in refused.parameters["problem"]


def test_a_target_restored_from_an_older_copy_is_refused() -> None:
    """The same table (its id) at a version before the one the state last applied."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1)
        apply_batch(spec, prepared(FIRST), 0)
        copy = Path(folder, "copy")
        shutil.copytree(spec.target, copy)
        apply_batch(spec, prepared(SECOND), 1)
        shutil.rmtree(spec.target)
        shutil.copytree(copy, spec.target)
        refused = _refused(spec, LATE, 2)
    assert refused.condition == "APPLY_CHANGES.TARGET_REPLACED"
    assert "before version 1" in refused.parameters["problem"]


@pytest.mark.parametrize("scd_type", [1, 2])
def test_compaction_and_vacuum_of_the_target_and_state_change_nothing(scd_type: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type)
        apply_batch(spec, prepared(FIRST), 0)
        apply_batch(spec, prepared(SECOND), 1)
        for path in (spec.target, spec.state):
            table = DeltaTable(path)
            table.optimize.compact()
            table.vacuum(0, enforce_retention_duration=False, dry_run=False)
        apply_batch(spec, prepared(LATE), 2)
        assert sorted_rows(read_table(spec.target)) == expected([*FIRST, *SECOND, *LATE], spec)


def test_a_row_deleted_by_hand_stays_deleted_while_other_keys_change() -> None:
    """An erasure: another writer deletes key 2; a later batch of other keys leaves it out,
    and only a later change of key 2 itself brings it back."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1)
        apply_batch(spec, prepared(FIRST), 0)
        DeltaTable(spec.target).delete("id = 2")
        apply_batch(spec, prepared(SECOND), 1)
        rows = sorted_rows(read_table(spec.target))
        assert rows == [r for r in expected([*FIRST, *SECOND], spec) if r["id"] != 2]
        back = [Change((2,), (3,), "upsert", {"a": 2, "b": "again"})]
        apply_batch(spec, prepared(back), 2)
        assert {"id": 2, "a": 2, "b": "again"} in sorted_rows(read_table(spec.target))


def test_a_state_that_names_no_target_is_bound_by_its_next_batch() -> None:
    """A state written before the check: its commits name no target, so its next batch
    is applied, and names it; a replaced target is refused after that."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1)
        apply_batch(spec, prepared(FIRST), 0)
        stranger = read_table(spec.target)
        (commit,) = Path(spec.state, "_delta_log").glob("*.json")
        text = commit.read_text()
        assert text.count('\\"target\\":') == 1
        commit.write_text(text.replace('\\"target\\":', '\\"then\\":'))
        apply_batch(spec, prepared(SECOND), 1)
        shutil.rmtree(spec.target)
        write_deltalake(spec.target, stranger)
        refused = _refused(spec, LATE, 2)
    assert refused.condition == "APPLY_CHANGES.TARGET_REPLACED"


@pytest.mark.parametrize("scd_type", [1, 2])
@pytest.mark.parametrize("touched", ["target deleted", "state deleted", "target replaced"])
def test_a_full_refresh_rebuilds_the_target_and_its_state_from_the_feed(
    scd_type: int, touched: str
) -> None:
    """Whatever was done by hand, a full refresh of the whole feed gives the model's
    target in one new version (the older ones still readable), and later batches apply
    on it as usual."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type)
        apply_batch(spec, prepared(FIRST), 0)
        apply_batch(spec, prepared(SECOND), 1)
        if touched == "target deleted":
            shutil.rmtree(spec.target)
        elif touched == "state deleted":
            shutil.rmtree(spec.state)
        else:
            stranger = read_table(spec.target)
            shutil.rmtree(spec.target)
            write_deltalake(spec.target, stranger)
        before = DeltaTable(spec.target).version() if Path(spec.target).exists() else None
        apply_batch(_refresh(spec), prepared([*FIRST, *SECOND]), 0)
        table = DeltaTable(spec.target)
        if before is not None:
            assert table.version() == before + 1
            assert DeltaTable(spec.target, version=before).to_pyarrow_table().num_rows
        assert sorted_rows(read_table(spec.target)) == expected([*FIRST, *SECOND], spec)
        apply_batch(dataclasses.replace(spec, app_id="next-writer"), prepared(LATE), 0)
        assert sorted_rows(read_table(spec.target)) == expected([*FIRST, *SECOND, *LATE], spec)


@pytest.mark.parametrize("scd_type", [1, 2])
def test_a_full_refresh_stopped_before_its_state_commit_gives_the_same_target_again(
    scd_type: int,
) -> None:
    """The refresh's target commit made, its state's not (the state as it was before):
    run again, the target is the same, and the state follows it."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type)
        apply_batch(spec, prepared(FIRST), 0)
        old_state = Path(folder, "old-state")
        shutil.copytree(spec.state, old_state)
        apply_batch(_refresh(spec), prepared([*FIRST, *SECOND]), 0)
        once = sorted_rows(read_table(spec.target))
        shutil.rmtree(spec.state)
        shutil.copytree(old_state, spec.state)
        apply_batch(_refresh(spec), prepared([*FIRST, *SECOND]), 0)
        assert sorted_rows(read_table(spec.target)) == once == expected([*FIRST, *SECOND], spec)
        apply_batch(spec, prepared(LATE), 1)
        assert sorted_rows(read_table(spec.target)) == expected([*FIRST, *SECOND, *LATE], spec)


GENERATION = "stream.refresh-g1"  # a full refresh's writer, as the client names it


@pytest.mark.parametrize("scd_type", [1, 2])
def test_a_streams_full_refresh_is_a_writer_generation_rebuilding_both_tables(
    scd_type: int,
) -> None:
    """Batches 0-1 of a stream; its full refresh (a new checkpoint: batch 0 again, as a
    generation of the writer) rebuilds both tables; its later batches (the checkpoint
    naming the generation: ``sink._as_named_writer``) apply as usual, exactly once."""
    with tempfile.TemporaryDirectory() as folder:
        stream = spec_for(folder, scd_type, app_id="stream")
        apply_batch(stream, prepared(FIRST), 0)
        apply_batch(stream, prepared(SECOND), 1)
        later = dataclasses.replace(stream, app_id=GENERATION)
        apply_batch(dataclasses.replace(later, full_refresh=True), prepared([*FIRST, *SECOND]), 0)
        assert sorted_rows(read_table(stream.target)) == expected([*FIRST, *SECOND], stream)
        apply_batch(later, prepared(LATE), 1)
        assert apply_batch(later, prepared(LATE), 1).skipped  # the run again after a stop
        assert DeltaTable(stream.state).transaction_version(GENERATION) == 1
        rows = sorted_rows(read_table(stream.target))
        assert rows == expected([*FIRST, *SECOND, *LATE], stream)


@pytest.mark.parametrize("scd_type", [1, 2])
def test_a_streams_full_refresh_stopped_between_its_commits_finishes_when_run_again(
    scd_type: int,
) -> None:
    """The refresh's first batch reached the target, not the state (its old copy stays);
    run again as the generation (without ``full_refresh``: a restart), it rebuilds the
    state alone."""
    with tempfile.TemporaryDirectory() as folder:
        stream = spec_for(folder, scd_type, app_id="stream")
        apply_batch(stream, prepared(FIRST), 0)
        apply_batch(stream, prepared(SECOND), 1)
        old_state = Path(folder, "old-state")
        shutil.copytree(stream.state, old_state)
        later = dataclasses.replace(stream, app_id=GENERATION)
        whole = prepared([*FIRST, *SECOND, *LATE])
        apply_batch(dataclasses.replace(later, full_refresh=True), whole, 0)
        target_version = DeltaTable(stream.target).version()
        shutil.rmtree(stream.state)
        shutil.copytree(old_state, stream.state)
        apply_batch(later, whole, 0)
        assert DeltaTable(stream.target).version() == target_version
        assert DeltaTable(stream.state).transaction_version(GENERATION) == 0
        rows = sorted_rows(read_table(stream.target))
        assert rows == expected([*FIRST, *SECOND, *LATE], stream)


@pytest.mark.parametrize("deleted", ["target", "state"])
def test_a_refreshed_streams_later_batch_refuses_a_table_deleted_by_hand(deleted: str) -> None:
    """Only a refresh's first batch rebuilds: once it is committed, a table the stream's
    generation finds gone was deleted by hand, and is refused as such."""
    with tempfile.TemporaryDirectory() as folder:
        later = spec_for(folder, 1, app_id=GENERATION)
        apply_batch(dataclasses.replace(later, full_refresh=True), prepared(FIRST), 0)
        apply_batch(later, prepared(SECOND), 1)
        shutil.rmtree(later.target if deleted == "target" else later.state)
        refused = _refused(later, LATE, 2)
    want = "TARGET_MISSING" if deleted == "target" else "STATE_MISSING"
    assert refused.condition == f"APPLY_CHANGES.{want}"


def test_a_checkpoint_set_aside_names_the_writer_its_stream_goes_on_as() -> None:
    """The old checkpoint kept beside the new one, which names the generation: the sink
    applies every later run's batches as it (the client naming only the stream's id), a
    checkpoint naming another stream's generation is not taken, and a checkpoint on an
    object store is refused."""
    with tempfile.TemporaryDirectory() as folder:
        location = f"{folder}/checkpoint"
        Path(location, "offsets").mkdir(parents=True)
        stream = dataclasses.replace(spec_for(folder, 1, app_id="stream"), checkpoint=location)
        assert sink._as_named_writer(stream) == stream
        aside = checkpoints.set_aside(location, GENERATION)
        assert aside is not None and Path(aside, "offsets").is_dir()
        assert [p.name for p in Path(location).iterdir()] == [checkpoints.WRITER_FILE]
        assert sink._as_named_writer(stream).app_id == GENERATION
        other = dataclasses.replace(stream, app_id="another-stream")
        assert sink._as_named_writer(other) == other
        assert checkpoints.set_aside(location, f"stream{REFRESH}g2") is not None
        assert len(list(Path(folder).glob("checkpoint.before-full-refresh-*"))) == 2
    with pytest.raises(ChangelogSourceError) as refused:
        checkpoints.set_aside("s3://bucket/checkpoint", GENERATION)
    assert refused.value.parameters["parameter"] == "checkpoint_location"


def test_a_streams_new_checkpoint_without_a_full_refresh_is_refused() -> None:
    """A checkpoint deleted by hand (naming no generation): the stream's batch 0 is older
    than its writer's marker, refused as a replaced checkpoint."""
    with tempfile.TemporaryDirectory() as folder:
        stream = spec_for(folder, 1, app_id="stream")
        apply_batch(stream, prepared(FIRST), 0)
        apply_batch(stream, prepared(SECOND), 1)
        refused = _refused(stream, LATE, 0)
    assert refused.condition == "APPLY_CHANGES.CHECKPOINT_REPLACED"


@MODEL
@given(data=st.data(), scd_type=st.sampled_from([1, 2]), cut=st.integers(0, 3))
def test_a_full_refresh_equals_the_model_whatever_came_before(
    data: st.DataObject, scd_type: int, cut: int
) -> None:
    """Any feed applied in batches up to ``cut``, then the whole feed as a full refresh:
    the target is the model's of the whole feed."""
    changes = data.draw(feeds(truncates=False))
    parts = data.draw(batches(changes))
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type)
        for i, part in enumerate(parts[:cut]):
            apply_batch(spec, prepared(part), i)
        apply_batch(_refresh(spec), prepared(changes), 0)
        assert sorted_rows(read_table(spec.target)) == expected(changes, spec)


# Iceberg targets: the same rules, through a SQL catalog (pyiceberg's own calls make the
# hand-made changes).


def _iceberg(folder: str, scd_type: int) -> ApplySpec:
    return spec_for(folder, scd_type, iceberg=True)


def _snapshots(spec: ApplySpec) -> list[int | None]:
    found = catalog_from(dict(spec.catalog))
    ids: list[int | None] = []
    for name in (spec.target, spec.state):
        try:
            snapshot = found.load_table(name).current_snapshot()
        except NoSuchTableError:
            ids.append(None)
            continue
        ids.append(None if snapshot is None else snapshot.snapshot_id)
    return ids


def _refused_iceberg(spec: ApplySpec, changes: list[Change], version: int) -> ChangelogSourceError:
    before = _snapshots(spec)
    with pytest.raises(ChangelogSourceError) as refused:
        apply_iceberg(spec, prepared(changes), version)
    assert _snapshots(spec) == before
    return refused.value


def _iceberg_rows(spec: ApplySpec) -> list[dict[str, Any]]:
    return sorted_rows(read_iceberg(dict(spec.catalog), spec.target))


@pytest.mark.parametrize("scd_type", [1, 2])
@pytest.mark.parametrize(
    ("touched", "condition"),
    [
        ("target dropped", "APPLY_CHANGES.TARGET_MISSING"),
        ("state dropped", "APPLY_CHANGES.STATE_MISSING"),
        ("target made again", "APPLY_CHANGES.TARGET_REPLACED"),
    ],
)
def test_an_iceberg_target_touched_by_hand_is_refused_and_a_full_refresh_rebuilds_it(
    scd_type: int, touched: str, condition: str
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        spec = _iceberg(folder, scd_type)
        apply_iceberg(spec, prepared(FIRST), 0)
        apply_iceberg(spec, prepared(SECOND), 1)
        found = catalog_from(dict(spec.catalog))
        if touched == "state dropped":
            found.drop_table(spec.state)
        else:
            stranger = found.load_table(spec.target).scan().to_arrow()
            found.drop_table(spec.target)
            if touched == "target made again":
                found.create_table(spec.target, schema=stranger.schema).append(stranger)
        assert _refused_iceberg(spec, LATE, 2).condition == condition
        before = _snapshots(spec)[0]
        apply_iceberg(_refresh(spec), prepared([*FIRST, *SECOND]), 0)
        assert _iceberg_rows(spec) == expected([*FIRST, *SECOND], spec)
        if before is not None:  # the table's rows before the refresh are still readable
            table = found.load_table(spec.target)
            assert table.scan(snapshot_id=before).to_arrow().num_rows
        apply_iceberg(dataclasses.replace(spec, app_id="next-writer"), prepared(LATE), 0)
        assert _iceberg_rows(spec) == expected([*FIRST, *SECOND, *LATE], spec)


@pytest.mark.parametrize("scd_type", [1, 2])
def test_expired_snapshots_and_another_writers_rewrite_of_an_iceberg_target_change_nothing(
    scd_type: int,
) -> None:
    """``expire_snapshots`` on both tables, and another writer's overwrite of the target
    with its own rows (a compaction): later batches apply exactly."""
    with tempfile.TemporaryDirectory() as folder:
        spec = _iceberg(folder, scd_type)
        apply_iceberg(spec, prepared(FIRST), 0)
        apply_iceberg(spec, prepared(SECOND), 1)
        found = catalog_from(dict(spec.catalog))
        target = found.load_table(spec.target)
        target.overwrite(target.scan().to_arrow())
        for name in (spec.target, spec.state):
            table = found.load_table(name)
            table.maintenance.expire_snapshots().older_than(datetime.now(timezone.utc)).commit()
        apply_iceberg(spec, prepared(LATE), 2)
        assert _iceberg_rows(spec) == expected([*FIRST, *SECOND, *LATE], spec)


def test_an_iceberg_target_is_filed_under_pyicebergs_default_catalog_name() -> None:
    """A SQL catalog given without a name files the target where pyiceberg's
    ``load_catalog()`` looks (``default``); a target made under the name used before is
    found and applied to there, not made anew."""
    with tempfile.TemporaryDirectory() as folder:
        spec = _iceberg(folder, 1)
        apply_iceberg(spec, prepared(FIRST), 0)
        mine = load_catalog(**iceberg_catalog(folder))  # a user's own pyiceberg
        assert sorted(".".join(t) for t in mine.list_tables("db")) == [spec.target, spec.state]
    with tempfile.TemporaryDirectory() as folder:
        spec = _iceberg(folder, 1)
        named = (*spec.catalog, ("name", LEGACY_CATALOG_NAME))
        apply_iceberg(dataclasses.replace(spec, catalog=named), prepared(FIRST), 0)
        apply_iceberg(spec, prepared(SECOND), 1)
        assert not load_catalog(**iceberg_catalog(folder)).namespace_exists("db")
        legacy = catalog_from(dict(spec.catalog), LEGACY_CATALOG_NAME)
        rows = sorted_rows(legacy.load_table(spec.target).scan().to_arrow())
        assert rows == expected([*FIRST, *SECOND], spec)
