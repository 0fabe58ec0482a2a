"""A target and its state touched by hand between two batches, through a server, for
Delta and Iceberg targets, batch calls and streams: each refusal reaches the client by its
condition with nothing written (no new target version or snapshot, no state commit, a
stream's micro-batch not committed to its checkpoint), another writer's maintenance
changes nothing, and a full refresh of the whole feed gives the target a clean run of the
same feed makes. The engine's unit tests (test_apply_binding.py) cover each case for both
formats and SCD types, and the full refresh against the model."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyiceberg.exceptions import NoSuchTableError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from spark_cdc import AppliedChanges, apply_changes, readStream
from spark_cdc.server_plugin.iceberg.table import catalog_from

from tests.support.apply_targets import read_iceberg, read_table, sorted_rows
from tests.support.auto_cdc_cases import SCHEMA, D, Event, U
from tests.support.delta_tables import merge_step
from tests.support.iceberg_tables import catalog_properties

BATCHES = [
    [U(1, "a", 5), U(2, "b", 5), U(3, "c", 5)],
    [U(1, "x", 6), D(2, 6), U(4, "d", 6)],
    [U(2, "late", 4), U(3, "y", 7), U(5, "e", 7)],
]


class Hands:
    """A target (and its state) of one format, and what a person does to them by hand."""

    def __init__(self, tmp_path: Path, name: str, format: str) -> None:
        self.format = format
        if format == "delta":
            self.target = str(tmp_path / name)
            self.state = self.target + "__apply_changes_state"
            self.arguments: dict[str, Any] = {}
        else:
            self.catalog = catalog_properties(tmp_path)
            del self.catalog["name"]  # pyiceberg's default name, as a user's own catalog
            self.target, self.state = f"db.{name}", f"db.{name}__apply_changes_state"
            self.arguments = {"format": "iceberg", "catalog": self.catalog}

    def versions(self) -> list[int | None]:
        """Each table's version (snapshot id), None when there is none."""
        ids: list[int | None] = []
        for name in (self.target, self.state):
            if self.format == "delta":
                ids.append(DeltaTable(name).version() if DeltaTable.is_deltatable(name) else None)
                continue
            try:
                snapshot = catalog_from(self.catalog).load_table(name).current_snapshot()
            except NoSuchTableError:
                snapshot = None
            ids.append(None if snapshot is None else snapshot.snapshot_id)
        return ids

    def rows(self) -> list[dict[str, Any]]:
        if self.format == "delta":
            return sorted_rows(read_table(self.target))
        return sorted_rows(read_iceberg(self.catalog, self.target))

    def delete(self, name: str) -> None:
        if self.format == "delta":
            shutil.rmtree(name)
        else:
            catalog_from(self.catalog).drop_table(name)

    def replace_target(self) -> None:
        """Another table with the same rows at the target's place."""
        if self.format == "delta":
            stranger = read_table(self.target)
            shutil.rmtree(self.target)
            write_deltalake(self.target, stranger)
            return
        found = catalog_from(self.catalog)
        stranger = found.load_table(self.target).scan().to_arrow()
        found.drop_table(self.target)
        found.create_table(self.target, schema=stranger.schema).append(stranger)

    def kept(self) -> Any:
        """What ``put_back`` puts back: a copy of both tables (Delta), or their metadata
        files (Iceberg: a dropped table's files stay)."""
        if self.format == "delta":
            copy = Path(self.target).parent / "kept"
            shutil.rmtree(copy, ignore_errors=True)
            for name in (self.target, self.state):
                shutil.copytree(name, copy / Path(name).name)
            return copy
        found = catalog_from(self.catalog)
        return {n: found.load_table(n).metadata_location for n in (self.target, self.state)}

    def put_back(self, kept: Any) -> None:
        """Both tables as ``kept`` had them, as a person restores them from a backup."""
        for name in (self.target, self.state):
            if self.format == "delta":
                shutil.rmtree(name, ignore_errors=True)
                shutil.copytree(kept / Path(name).name, name)
                continue
            found = catalog_from(self.catalog)
            if found.table_exists(name):
                found.drop_table(name)
            found.register_table(name, kept[name])

    def maintain(self) -> None:
        """Routine maintenance of both tables (Iceberg: the target rewritten with its own
        rows, as a compaction, and old snapshots expired)."""
        for name in (self.target, self.state):
            if self.format == "delta":
                table = DeltaTable(name)
                table.optimize.compact()
                table.vacuum(0, enforce_retention_duration=False, dry_run=False)
                continue
            table = catalog_from(self.catalog).load_table(name)
            if name == self.target:
                table.overwrite(table.scan().to_arrow())
            table.maintenance.expire_snapshots().older_than(datetime.now(timezone.utc)).commit()


def _apply(
    spark: SparkSession, hands: Hands, events: list[Event], scd_type: int, **more: Any
) -> None:
    done = apply_changes(
        spark.createDataFrame(events, SCHEMA),
        hands.target,
        keys=["id"],
        sequence_by="seq",
        apply_as_deletes="is_delete",
        except_column_list=["seq", "is_delete"],
        stored_as_scd_type=scd_type,
        **hands.arguments,
        **more,
    )
    assert isinstance(done, AppliedChanges)


def _refused(call: Any, hands: Hands) -> str:
    """The call's error (its text, the condition in it); neither table changed by it."""
    before = hands.versions()
    with pytest.raises(PySparkException) as refused:
        call()
    assert hands.versions() == before
    return str(refused.value)


# Each format and SCD type through a server once (batch calls or a stream); the engine's
# unit tests run every case for all four.
@pytest.mark.parametrize(("format", "scd_type"), [("delta", 2), ("iceberg", 1)])
def test_hand_edits_between_batch_calls_are_refused_and_a_full_refresh_rebuilds(
    spark: SparkSession, tmp_path: Path, format: str, scd_type: int
) -> None:
    clean, hands = Hands(tmp_path, "clean", format), Hands(tmp_path, "target", format)
    for events in BATCHES:
        _apply(spark, clean, events, scd_type)
    whole = [e for events in BATCHES for e in events]
    want = clean.rows()

    def refresh() -> None:
        _apply(spark, hands, whole, scd_type, full_refresh=True)
        assert hands.rows() == want

    def later() -> None:
        _apply(spark, hands, BATCHES[2], scd_type)

    _apply(spark, hands, BATCHES[0], scd_type)
    _apply(spark, hands, BATCHES[1], scd_type)
    hands.delete(hands.target)  # deleted to start again, the state kept
    assert "APPLY_CHANGES.TARGET_MISSING" in _refused(later, hands)
    refresh()
    hands.delete(hands.state)  # the state cleaned up, the target kept
    assert "APPLY_CHANGES.STATE_MISSING" in _refused(later, hands)
    refresh()
    hands.replace_target()  # another table at its place, the same columns and rows
    assert "APPLY_CHANGES.TARGET_REPLACED" in _refused(later, hands)
    refresh()
    hands.maintain()
    later()  # applied again: changes already there are each applied once
    assert hands.rows() == want


def _stream(
    spark: SparkSession, source: str, hands: Hands, checkpoint: str, scd_type: int, **more: Any
) -> Any:
    reader = readStream(spark).option("rowId", "id").option("computeUpdates", True)
    return apply_changes(
        reader.option("startingVersion", 0).load(source),
        hands.target,
        keys=["id"],
        sequence_by="_commit_version",
        stored_as_scd_type=scd_type,
        checkpoint_location=checkpoint,
        **hands.arguments,
        **more,
    )


@pytest.mark.parametrize(("format", "scd_type"), [("delta", 1), ("iceberg", 2)])
def test_a_stream_refuses_hand_edits_and_starts_over_with_a_full_refresh(
    spark: SparkSession, tmp_path: Path, format: str, scd_type: int
) -> None:
    """A stream's next micro-batch after each hand edit fails by name, nothing of it
    committed (to the tables or to its checkpoint; both tables put back by hand after
    each); started with full_refresh=True it sets its checkpoint aside and rebuilds the
    target from the feed's start; started again without it, it goes on from there; at the
    end the target equals a clean stream's."""
    source, checkpoint = str(tmp_path / "source"), str(tmp_path / "checkpoint")
    hands = Hands(tmp_path, "target", format)
    write_deltalake(source, pa.table({"id": list(range(5)), "v": [f"v{i}" for i in range(5)]}))
    step = iter(range(1, 100))

    def run(into: Hands, at: str, **more: Any) -> None:
        query = _stream(spark, source, into, at, scd_type, **more)
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    merge_step(source, next(step))
    run(hands, checkpoint)
    merge_step(source, next(step))
    committed = sorted(p.name for p in Path(checkpoint, "commits").iterdir())
    edits = [
        (lambda: hands.delete(hands.target), "APPLY_CHANGES.TARGET_MISSING"),
        (lambda: hands.delete(hands.state), "APPLY_CHANGES.STATE_MISSING"),
        (hands.replace_target, "APPLY_CHANGES.TARGET_REPLACED"),
    ]
    for edit, condition in edits:
        kept = hands.kept()
        edit()
        assert condition in _refused(lambda: run(hands, checkpoint), hands)
        assert sorted(p.name for p in Path(checkpoint, "commits").iterdir()) == committed
        hands.put_back(kept)
    hands.maintain()
    run(hands, checkpoint, full_refresh=True)
    assert list(tmp_path.glob("checkpoint.before-full-refresh-*"))
    merge_step(source, next(step))
    run(hands, checkpoint)
    clean = Hands(tmp_path, "clean", format)
    run(clean, str(tmp_path / "clean-checkpoint"))
    assert hands.rows() == clean.rows()
