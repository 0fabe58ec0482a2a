"""``iceberg_changelog`` on the Iceberg tables other engines wrote (Spark, Flink, Hive, Impala,
NiFi, Iceberg Java): every snapshot's rows are its parent's rows with the snapshot's changes
applied, checked against what the tables' own documentation says each snapshot holds:

- the fixtures' ``expected_snapshots.json`` (each snapshot's row count and the sha256 of its
  rows, from a reference reader written for them, agreeing with the upstream results);
- the conformance tables' SOURCES.md row counts, and each snapshot's rows as pyiceberg reads
  them where pyiceberg can (no equality deletes, paths spelt one way).

Then the same feed as a stream, and post-processed in the source and by the client's plan.
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import spark_cdc
from pyspark.sql import DataFrame, SparkSession
from spark_cdc.server_plugin.iceberg.table import open_table
from spark_cdc.server_plugin.iceberg.timeline import TimedSnapshot, timeline
from spark_cdc.server_plugin.vocabulary import CHANGE_TYPE, METADATA_COLUMNS

from tests.support.feeds import collect_rows, run_stream
from tests.support.iceberg_fixtures import FOLDERS, ICEBERG_FIXTURES, require_tables
from tests.support.iceberg_io import storage_options

pytestmark = pytest.mark.usefixtures("spark")

FIXTURES = [f for f in FOLDERS if f.parent == ICEBERG_FIXTURES]
CONFORMANCE = [f for f in FOLDERS if f.parent != ICEBERG_FIXTURES]


def _ids(folders: list[Path]) -> list[str]:
    return [f.name for f in folders]


def _storage(folder: Path) -> dict[str, str]:
    return {f"storage.{k}": v for k, v in storage_options(folder).items()}


def _raw(spark: SparkSession, folder: Path, **options: str) -> DataFrame:
    return (
        spark.read.format("iceberg_changelog")
        .options(**_storage(folder))
        .options(**options)
        .load(str(folder))
    )


def _snapshots(folder: Path) -> tuple[tuple[TimedSnapshot, ...], bool]:
    table = open_table(str(folder), storage_options(folder))
    found = timeline(table.metadata)
    return found.snapshots, found.expired_before


# Each row as the fixtures' reference reader wrote it (README: "Expected contents").
def _canonical(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc)
        return value.isoformat()
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def _lines(table: pa.Table) -> list[tuple[str, str]]:
    """(change type, the row's canonical JSON) for each row of a feed read as Arrow."""
    data = [n for n in table.column_names if n not in METADATA_COLUMNS]
    kinds = table.column(CHANGE_TYPE).to_pylist()
    rows = table.select(data).to_pylist()
    return [
        (kind, json.dumps(_canonical(row), sort_keys=True))
        for kind, row in zip(kinds, rows, strict=True)
    ]


def _replayed(
    spark: SparkSession, folder: Path, versions: list[int], inherited: bool = False
) -> list[Counter[str]]:
    """The table's rows after each of ``versions``, built from the feed alone: each
    snapshot's deletes taken from the rows before it (each must be there), then its
    inserts added. Each state is read in its own snapshot's schema (endingVersion).
    ``inherited``: the oldest snapshot kept had rows the feed never inserted (the snapshots
    before it expired); a delete of one of them is counted under the key ``None``."""
    states = []
    for last in versions:
        feed = _raw(spark, folder, startingVersion="earliest", endingVersion=str(last))
        arrow = feed.orderBy("_commit_version").toArrow()
        state: Counter[str] = Counter()
        by_version: dict[int, list[tuple[str, str]]] = {}
        for version, line in zip(
            arrow.column("_commit_version").to_pylist(), _lines(arrow), strict=True
        ):
            by_version.setdefault(version, []).append(line)
        for version in sorted(by_version):
            changes = by_version[version]
            for kind, row in changes:
                if kind == "delete" and inherited and not state[row]:
                    state[_INHERITED] -= 1
                elif kind == "delete":
                    assert state[row] > 0, f"version {version} deletes a row not there: {row}"
                    state[row] -= 1
            state.update(row for kind, row in changes if kind == "insert")
            assert {kind for kind, _ in changes} <= {"insert", "delete"}
        states.append(Counter({k: n for k, n in state.items() if n}))
    return states


_INHERITED = "(a row of the snapshots that expired)"


def _digest(state: Counter[str]) -> str:
    return hashlib.sha256("\n".join(sorted(state.elements())).encode()).hexdigest()


@pytest.mark.parametrize("folder", FIXTURES, ids=_ids(FIXTURES))
def test_each_snapshot_of_a_fixture_is_its_parent_with_its_changes(
    spark: SparkSession, folder: Path
) -> None:
    require_tables()
    expected = json.loads((ICEBERG_FIXTURES / "expected_snapshots.json").read_text())
    snapshots, _ = _snapshots(folder)
    listed = expected[folder.name]["snapshots"]
    assert [t.snapshot.sequence_number for t in snapshots] == [s["sequence_number"] for s in listed]
    states = _replayed(spark, folder, [t.version for t in snapshots])
    for state, snapshot in zip(states, listed, strict=True):
        assert sum(state.values()) == snapshot["row_count"], snapshot
        assert _digest(state) == snapshot["rows_sha256"], snapshot


def _documented_counts() -> dict[str, list[int]]:
    """Each conformance table's row count per snapshot, from its SOURCES.md table."""
    text = (CONFORMANCE[0].parent / "SOURCES.md").read_text() if CONFORMANCE else ""
    counts = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 8 and cells[1].startswith("`") and re.fullmatch(r"[\d ]+", cells[7]):
            counts[cells[1].strip("`")] = [int(n) for n in cells[7].split()]
    return counts


@pytest.mark.parametrize("folder", CONFORMANCE, ids=_ids(CONFORMANCE))
def test_each_snapshot_of_a_conformance_table_is_its_parent_with_its_changes(
    spark: SparkSession, folder: Path
) -> None:
    require_tables()
    documented = _documented_counts()[folder.name]
    snapshots, expired = _snapshots(folder)
    assert len(snapshots) == len(documented)
    states = _replayed(spark, folder, [t.version for t in snapshots], expired)
    counts = [sum(s.values()) for s in states]
    if expired:  # the rows before the oldest snapshot kept are not changes of the feed
        inherited = documented[0] - int(snapshots[0].snapshot.summary["added-records"])
        counts = [c + inherited for c in counts]
    assert counts == documented
    location = json.loads((folder / "location.json").read_text())
    if expired or not location.get("path_strings_consistent", True):
        return
    table = open_table(str(folder), storage_options(folder))
    for timed, state in zip(snapshots, states, strict=True):
        try:
            arrow = table.scan(snapshot_id=timed.snapshot.snapshot_id).to_arrow()
        except ValueError as problem:  # pyiceberg 0.12 refuses equality deletes
            assert "equality deletes" in str(problem)
            continue
        lines = [json.dumps(_canonical(r), sort_keys=True) for r in arrow.to_pylist()]
        assert Counter(lines) == state, timed.version


@pytest.mark.parametrize("folder", FOLDERS, ids=_ids(FOLDERS))
def test_a_stream_serves_what_a_batch_read_does(spark: SparkSession, folder: Path) -> None:
    require_tables()
    batch = _raw(spark, folder, startingVersion="earliest")
    stream = (
        spark.readStream.format("iceberg_changelog")
        .options(**_storage(folder))
        .option("startingVersion", "earliest")
        .option("maxFilesPerTrigger", "1")
        .load(str(folder))
    )
    served = run_stream(stream, f"iceberg_stream_{folder.name}")
    assert served.schema == batch.schema
    assert collect_rows(served) == collect_rows(batch)


@pytest.mark.parametrize("folder", FOLDERS, ids=_ids(FOLDERS))
@pytest.mark.parametrize("mode", ["dropCarryovers", "netChanges"])
def test_the_source_and_the_client_plan_post_process_alike(
    spark: SparkSession, folder: Path, mode: str
) -> None:
    require_tables()

    def feed(where: str) -> DataFrame:
        reader = spark_cdc.read(spark).format("iceberg").options(**_storage(folder))
        return (
            reader.option("startingVersion", "earliest")
            .option("deduplicationMode", mode)
            .option("postProcessing", where)
            .load(str(folder))
        )

    source, client = feed("source"), feed("client")
    assert source.schema == client.schema
    assert collect_rows(source) == collect_rows(client)
    raw = _raw(spark, folder, startingVersion="earliest")
    assert source.count() <= raw.count()
