"""A target and its state touched by hand between two batches, through a server, batch
and stream: each refusal reaches the client by its condition with nothing written (no
new target version, no state commit, a stream's micro-batch not committed), another
writer's compaction and vacuum change nothing, and a full refresh of the whole feed gives
the target a clean run of the same feed makes (the engine's unit tests,
test_apply_binding.py, cover each case and the model)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from spark_cdc import AppliedChanges, apply_changes, readStream

from tests.support.apply_targets import read_table, sorted_rows
from tests.support.auto_cdc_cases import SCHEMA, D, Event, U
from tests.support.delta_tables import merge_step

BATCHES = [
    [U(1, "a", 5), U(2, "b", 5), U(3, "c", 5)],
    [U(1, "x", 6), D(2, 6), U(4, "d", 6)],
    [U(2, "late", 4), U(3, "y", 7), U(5, "e", 7)],
]


def _apply(
    spark: SparkSession, target: str, events: list[Event], scd_type: int, **more: Any
) -> None:
    done = apply_changes(
        spark.createDataFrame(events, SCHEMA),
        target,
        keys=["id"],
        sequence_by="seq",
        apply_as_deletes="is_delete",
        except_column_list=["seq", "is_delete"],
        stored_as_scd_type=scd_type,
        **more,
    )
    assert isinstance(done, AppliedChanges)


def _versions(*paths: str) -> list[int | None]:
    return [DeltaTable(p).version() if DeltaTable.is_deltatable(p) else None for p in paths]


def _refused(call: Any, *paths: str) -> str | None:
    """The call's error condition; the tables at ``paths`` unchanged by it."""
    before = _versions(*paths)
    with pytest.raises(PySparkException) as refused:
        call()
    assert _versions(*paths) == before
    return refused.value.getCondition()


@pytest.mark.parametrize("scd_type", [1, 2])
def test_hand_edits_between_batch_calls_are_refused_and_a_full_refresh_rebuilds(
    spark: SparkSession, tmp_path: Path, scd_type: int
) -> None:
    clean, target = str(tmp_path / "clean"), str(tmp_path / "target")
    state = target + "__apply_changes_state"
    for events in BATCHES:
        _apply(spark, clean, events, scd_type)
    whole = [e for events in BATCHES for e in events]
    want = sorted_rows(read_table(clean))

    def refresh() -> None:
        _apply(spark, target, whole, scd_type, full_refresh=True)
        assert sorted_rows(read_table(target)) == want

    def later() -> None:
        _apply(spark, target, BATCHES[2], scd_type)

    _apply(spark, target, BATCHES[0], scd_type)
    _apply(spark, target, BATCHES[1], scd_type)
    shutil.rmtree(target)  # deleted to start again, the state kept
    assert _refused(later, target, state) == "APPLY_CHANGES.TARGET_MISSING"
    assert not Path(target).exists()
    refresh()
    shutil.rmtree(state)  # the state cleaned up, the target kept
    assert _refused(later, target, state) == "APPLY_CHANGES.STATE_MISSING"
    refresh()
    stranger = read_table(target)
    shutil.rmtree(target)
    write_deltalake(target, stranger)  # another table at the path, the same columns
    assert _refused(later, target, state) == "APPLY_CHANGES.TARGET_REPLACED"
    refresh()
    versions = DeltaTable(target).version()
    assert DeltaTable(target, version=versions - 1).to_pyarrow_table().num_rows  # time travel
    for path in (target, state):  # another writer's routine maintenance
        table = DeltaTable(path)
        table.optimize.compact()
        table.vacuum(0, enforce_retention_duration=False, dry_run=False)
    later()  # applied again: changes already there are each applied once
    assert sorted_rows(read_table(target)) == want


def _stream(
    spark: SparkSession, source: str, target: str, checkpoint: str, scd_type: int, **more: Any
) -> Any:
    reader = readStream(spark).option("rowId", "id").option("computeUpdates", True)
    return apply_changes(
        reader.option("startingVersion", 0).load(source),
        target,
        keys=["id"],
        sequence_by="_commit_version",
        stored_as_scd_type=scd_type,
        checkpoint_location=checkpoint,
        **more,
    )


@pytest.mark.parametrize(
    ("scd_type", "touched", "condition"),
    [(1, "target", "APPLY_CHANGES.TARGET_MISSING"), (2, "state", "APPLY_CHANGES.STATE_MISSING")],
)
def test_a_streams_next_micro_batch_after_a_hand_edit_is_refused(
    spark: SparkSession, tmp_path: Path, scd_type: int, touched: str, condition: str
) -> None:
    """The stream's first micro-batches applied, the target (or state) deleted while it
    ran on: its next micro-batch fails by name, and nothing of it is committed, to the
    tables or to the checkpoint."""
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    state, checkpoint = target + "__apply_changes_state", str(tmp_path / "checkpoint")
    write_deltalake(source, pa.table({"id": list(range(5)), "v": [f"v{i}" for i in range(5)]}))
    query = _stream(spark, source, target, checkpoint, scd_type)
    try:
        merge_step(source, 1)
        query.processAllAvailable()
        committed = sorted(p.name for p in Path(checkpoint, "commits").iterdir())
        shutil.rmtree(target if touched == "target" else state)
        before = _versions(target, state)
        merge_step(source, 2)
        with pytest.raises(PySparkException) as failed:
            query.processAllAvailable()
    finally:
        query.stop()
    assert condition in str(failed.value)
    assert _versions(target, state) == before
    assert sorted(p.name for p in Path(checkpoint, "commits").iterdir()) == committed


@pytest.mark.parametrize("scd_type", [1, 2])
def test_a_streams_full_refresh_starts_over_in_a_new_checkpoint(
    spark: SparkSession, tmp_path: Path, scd_type: int
) -> None:
    """A stream whose target was deleted is refused; started with full_refresh=True it
    sets its checkpoint aside and rebuilds the target from the feed's start (equal to a
    clean stream's); started again without it, it goes on from there, each change once."""
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    clean, checkpoint = str(tmp_path / "clean"), str(tmp_path / "checkpoint")
    write_deltalake(source, pa.table({"id": list(range(5)), "v": [f"v{i}" for i in range(5)]}))

    def run(into: str, at: str, **more: Any) -> None:
        query = _stream(spark, source, into, at, scd_type, **more)
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    merge_step(source, 1)
    run(target, checkpoint)
    merge_step(source, 2)
    shutil.rmtree(target)
    with pytest.raises(PySparkException) as refused:
        run(target, checkpoint)
    assert "APPLY_CHANGES.TARGET_MISSING" in str(refused.value)
    run(target, checkpoint, full_refresh=True)
    assert [p.name for p in tmp_path.glob("checkpoint.before-full-refresh-*")]
    merge_step(source, 3)
    run(target, checkpoint)
    run(clean, str(tmp_path / "clean-checkpoint"))
    assert sorted_rows(read_table(target)) == sorted_rows(read_table(clean))
