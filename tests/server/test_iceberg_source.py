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
import shutil
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

from tests.support.feeds import run_stream
from tests.support.iceberg_fixtures import FOLDERS, ICEBERG_FIXTURES, each, require_tables
from tests.support.iceberg_io import storage_options

pytestmark = pytest.mark.usefixtures("spark")

FIXTURES = [f.name for f in FOLDERS if f.parent == ICEBERG_FIXTURES]
CONFORMANCE = [f.name for f in FOLDERS if f.parent != ICEBERG_FIXTURES]
EVERY = [f.name for f in FOLDERS]
DOCUMENTED_COUNTS = next((f.parent / "SOURCES.md" for f in FOLDERS if f.name in CONFORMANCE), None)


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every Iceberg table copied once into the test's folder, which a containerized server
    sees too (read in place through their location maps)."""
    require_tables()
    root = tmp_path_factory.mktemp("iceberg")
    copies = {}
    for folder in FOLDERS:
        copies[folder.name] = Path(shutil.copytree(folder, root / folder.name))
    return copies


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
def _canonical(value: Any, sort_maps: bool = False) -> Any:
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
        return {k: _canonical(v, sort_maps) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_canonical(v, sort_maps) for v in value]
        if sort_maps and value and all(isinstance(v, tuple) for v in value):  # a map's entries
            items.sort(key=lambda entry: json.dumps(entry, sort_keys=True))
        return items
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


def _whole(df: DataFrame) -> Counter[str]:
    """Every row of ``df`` with every column, as a multiset, to compare whole outputs (a
    map's entries in any order: a memory sink keeps them in another)."""
    rows = df.toArrow().to_pylist()
    return Counter(json.dumps(_canonical(r, sort_maps=True), sort_keys=True) for r in rows)


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


@pytest.mark.parametrize("name", each(FIXTURES))
def test_each_snapshot_of_a_fixture_is_its_parent_with_its_changes(
    spark: SparkSession, tables: dict[str, Path], name: str
) -> None:
    folder = tables[name]
    expected = json.loads((ICEBERG_FIXTURES / "expected_snapshots.json").read_text())
    assert folder.name == name
    snapshots, _ = _snapshots(folder)
    listed = expected[folder.name]["snapshots"]
    assert [t.snapshot.sequence_number for t in snapshots] == [s["sequence_number"] for s in listed]
    states = _replayed(spark, folder, [t.version for t in snapshots])
    for state, snapshot in zip(states, listed, strict=True):
        assert sum(state.values()) == snapshot["row_count"], snapshot
        assert _digest(state) == snapshot["rows_sha256"], snapshot


def _documented_counts() -> dict[str, list[int]]:
    """Each conformance table's row count per snapshot, from its SOURCES.md table."""
    text = DOCUMENTED_COUNTS.read_text() if DOCUMENTED_COUNTS else ""
    counts = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 8 and cells[1].startswith("`") and re.fullmatch(r"[\d ]+", cells[7]):
            counts[cells[1].strip("`")] = [int(n) for n in cells[7].split()]
    return counts


@pytest.mark.parametrize("name", each(CONFORMANCE))
def test_each_snapshot_of_a_conformance_table_is_its_parent_with_its_changes(
    spark: SparkSession, tables: dict[str, Path], name: str
) -> None:
    folder = tables[name]
    documented = _documented_counts()[name]
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


@pytest.mark.parametrize("name", each(EVERY))
def test_a_stream_serves_what_a_batch_read_does(
    spark: SparkSession, tables: dict[str, Path], name: str
) -> None:
    folder = tables[name]
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
    assert _whole(served) == _whole(batch)


def _identifier_fields(folder: Path) -> str:
    schema = open_table(str(folder), storage_options(folder)).metadata.schema()
    return ",".join(schema.find_column_name(i) for i in schema.identifier_field_ids)


def _row_id(folder: Path) -> str:
    """The table's identifier fields, else its top-level columns of primitive types."""
    schema = open_table(str(folder), storage_options(folder)).metadata.schema()
    names = [f.name for f in schema.fields if f.field_type.is_primitive]
    return _identifier_fields(folder) or ",".join(names)


@pytest.mark.parametrize("name", each(EVERY))
@pytest.mark.parametrize(
    "passes",
    [
        {"deduplicationMode": "dropCarryovers"},
        {"deduplicationMode": "dropCarryovers", "computeUpdates": "true"},
        {"deduplicationMode": "netChanges", "computeUpdates": "true"},
    ],
    ids=["carry-overs", "updates", "net-changes"],
)
def test_the_source_and_the_client_plan_post_process_alike(
    spark: SparkSession, tables: dict[str, Path], name: str, passes: dict[str, str]
) -> None:
    """The source given no rowId groups by the table's identifier fields, as the client's
    plan does when told them; a table without any needs rowId for update detection (net
    changes, the client's, always does)."""
    folder = tables[name]
    identifiers = _identifier_fields(folder)
    needs_one = "computeUpdates" in passes
    net = passes["deduplicationMode"] == "netChanges"

    def feed(where: str) -> DataFrame:
        reader = spark_cdc.read(spark).format("iceberg").options(**_storage(folder))
        options = {"startingVersion": "earliest", "postProcessing": where, **passes}
        if where == "client" or net:
            row_id = identifiers or (_row_id(folder) if needs_one else "")
        else:
            row_id = "" if identifiers or not needs_one else _row_id(folder)
        if row_id:
            options["rowId"] = row_id
        return reader.options(**options).load(str(folder))

    source, client = feed("source"), feed("client")
    assert source.schema == client.schema
    assert _whole(source) == _whole(client)


def test_update_detection_without_a_row_id_needs_identifier_fields(
    spark: SparkSession, tables: dict[str, Path]
) -> None:
    """A table without identifier fields has no row id to find: computeUpdates without
    rowId is refused, by the source, with Spark's condition; so is net changes without
    rowId even on a table that has them, as the client's plan is built without asking."""
    plain, keyed = tables["spark_v3_deletion_vectors"], tables["flink_eq_deletes_partitioned"]
    assert not _identifier_fields(plain) and _identifier_fields(keyed)
    for folder, passes in (
        (plain, {"computeUpdates": "true"}),
        (keyed, {"deduplicationMode": "netChanges"}),
    ):
        reader = spark_cdc.read(spark).format("iceberg").options(**_storage(folder))
        with pytest.raises(Exception, match=r"\[INVALID_CHANGELOG_SCHEMA\.MISSING_ROW_ID\]"):
            reader.options(**passes).load(str(folder)).collect()


def test_a_copy_on_write_rewrite_serves_only_the_rows_it_deleted(
    spark: SparkSession, tables: dict[str, Path]
) -> None:
    """lineitem's overwrite rewrote a data file: 60175 rows out, 51793 of them back in
    unchanged. Without carry-overs the snapshot is exactly the rows it deleted."""
    folder = tables["spark_cow_overwrite_lineitem"]
    before, after = _replayed(spark, folder, [1, 2])
    reader = spark_cdc.read(spark).format("iceberg").options(**_storage(folder))
    feed = reader.option("startingVersion", 2).option("deduplicationMode", "dropCarryovers")
    served = feed.load(str(folder)).toArrow()
    assert Counter(kind for kind, _ in _lines(served)) == {"delete": 8382}
    assert Counter(row for _, row in _lines(served)) == before - after


def test_a_v3_rewrite_is_resolved_by_its_rows_lineage(
    spark: SparkSession, tables: dict[str, Path], tmp_path: Path
) -> None:
    """The row-lineage fixture with its compaction relabelled ``overwrite``: a copy-on-write
    rewrite of three rows that changed none (Iceberg v3 writers keep a copied row's
    ``_row_id`` and sequence number, as this file does). The raw feed serves the three out
    and the three back in; resolved by their lineage, nothing (any pass set)."""
    folder = Path(shutil.copytree(tables["spark_v3_row_lineage"], tmp_path / "lineage"))
    current = folder / "metadata" / "v5.metadata.json"
    text = current.read_text()
    assert text.count('"operation":"replace"') == 1
    current.write_text(text.replace('"operation":"replace"', '"operation":"overwrite"'))
    raw = _raw(spark, folder, startingVersion="4").toArrow()
    kinds = Counter(kind for kind, _ in _lines(raw))
    assert kinds == {"delete": 3, "insert": 3}
    assert Counter(row for kind, row in _lines(raw) if kind == "delete") == Counter(
        row for kind, row in _lines(raw) if kind == "insert"
    )
    for passes in (
        {"deduplicationMode": "dropCarryovers"},
        {"computeUpdates": "true", "rowId": "i"},
    ):
        resolved = _raw(spark, folder, startingVersion="4", **passes)
        assert resolved.columns == raw.column_names
        assert resolved.count() == 0


EXPIRED = "java_eq_pos_deletes_products_expired"


def test_a_read_from_expired_snapshots_is_data_loss(
    spark: SparkSession, tables: dict[str, Path]
) -> None:
    folder = tables[EXPIRED]
    oldest = _snapshots(folder)[0][0].version
    with pytest.raises(Exception, match=r"ICEBERG_CHANGELOG\.DATA_LOSS\]") as caught:
        _raw(spark, folder, startingVersion="1").collect()
    assert f"start from version {oldest} or later" in str(caught.value)
    on = _raw(spark, folder, startingVersion="1", failOnDataLoss="false")
    earliest = _raw(spark, folder, startingVersion="earliest")
    assert _whole(on) == _whole(earliest)
    assert min(r[0] for r in on.select("_commit_version").collect()) == oldest


def test_snapshot_ids_bound_a_read_as_versions_do(
    spark: SparkSession, tables: dict[str, Path]
) -> None:
    folder = tables["java_pos_deletes_orders"]
    snapshots, _ = _snapshots(folder)
    second, third = snapshots[1], snapshots[2]
    by_id = _raw(
        spark,
        folder,
        startingSnapshotId=str(second.snapshot.snapshot_id),
        endingSnapshotId=str(third.snapshot.snapshot_id),
    )
    by_version = _raw(
        spark, folder, startingVersion=str(second.version), endingVersion=str(third.version)
    )
    assert _whole(by_id) == _whole(by_version)
    exclusive = _raw(
        spark,
        folder,
        startingSnapshotId=str(second.snapshot.snapshot_id),
        startingBoundInclusive="false",
    )
    assert {r[0] for r in exclusive.select("_commit_version").distinct().collect()} == {
        t.version for t in snapshots[2:]
    }
    with pytest.raises(Exception, match=r"ICEBERG_CHANGELOG\.SNAPSHOT_NOT_IN_BRANCH\]"):
        _raw(spark, folder, startingSnapshotId="12345").collect()
    with pytest.raises(Exception, match=r"INVALID_CDC_OPTION\.SNAPSHOT_ID_WITH_OTHER_BOUNDS\]"):
        _raw(spark, folder, startingSnapshotId="1", startingVersion="1").collect()


def test_timestamps_bound_a_read_by_the_snapshots_times(
    spark: SparkSession, tables: dict[str, Path]
) -> None:
    folder = tables["java_pos_deletes_orders"]
    snapshots, _ = _snapshots(folder)
    stamp = dt.datetime.fromtimestamp(snapshots[2].timestamp_ms / 1000, dt.timezone.utc)
    text = stamp.strftime("%Y-%m-%d %H:%M:%S.%f")
    from_third = _raw(spark, folder, startingTimestamp=text)
    assert {r[0] for r in from_third.select("_commit_version").distinct().collect()} == {
        t.version for t in snapshots[2:]
    }
    upto_third = _raw(spark, folder, startingTimestamp="1970-01-01", endingTimestamp=text)
    assert {r[0] for r in upto_third.select("_commit_version").distinct().collect()} == {
        t.version for t in snapshots[:3]
    }


def test_an_unknown_branch_is_refused_by_name(spark: SparkSession, tables: dict[str, Path]) -> None:
    folder = tables["spark_v3_row_lineage"]
    with pytest.raises(Exception, match=r"ICEBERG_CHANGELOG\.UNKNOWN_BRANCH\]"):
        _raw(spark, folder, startingVersion="0", branch="audit").collect()
    not_a_table = spark.read.format("iceberg_changelog").options(**_storage(folder))
    with pytest.raises(Exception, match=r"ICEBERG_CHANGELOG\.NOT_AN_ICEBERG_TABLE\]"):
        not_a_table.load(str(folder / "data")).collect()


def test_commit_timestamps_strictly_increase_and_are_the_snapshots(
    spark: SparkSession, tables: dict[str, Path]
) -> None:
    for folder in tables.values():
        snapshots, _ = _snapshots(folder)
        feed = _raw(spark, folder, startingVersion="earliest")
        served = {
            (r[0], r[1])
            for r in feed.select("_commit_version", "_commit_timestamp").distinct().collect()
        }
        stamps = [ts for _, ts in sorted(served)]
        assert stamps == sorted(set(stamps)), folder.name
        recorded = {t.version: t.timestamp_ms for t in snapshots}
        assert {v: int(ts.timestamp() * 1000) for v, ts in served}.items() <= recorded.items()
