"""delta_changelog on tables with deletion vectors: Databricks' fixtures and tables written
by hand following the protocol, batch and streaming.

The key invariant at every version v: the post-processed changes of v (carry-overs dropped,
updates detected) applied to snapshot v-1 give snapshot v, snapshots read by delta-rs
(which applies deletion vectors); and the raw feed equals delta-rs's ``load_cdf``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from spark_cdc import ChangelogReader

from tests.support.changelog_invariants import (
    PROCESSED,
    assert_every_version,
    assert_raw_is_load_cdf,
    assert_stream_equals_batch,
)
from tests.support.delta_dv_scenarios import SCENARIOS, dv_scenario
from tests.support.delta_dv_tables import rs_snapshot
from tests.support.delta_fixtures import copy_fixture

# The format alone (bitmaps, z85, checksums) is tested without a server in
# tests/unit/test_deletion_vector_format.py.


# -- hand-written tables (tests/support/delta_dv_scenarios.py) -----------------------------


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_hand_written_dv_tables_keep_the_invariant_and_equal_load_cdf(
    spark: SparkSession, tmp_path: Path, scenario: str
) -> None:
    path = dv_scenario(tmp_path, scenario)
    assert_every_version(spark, path, "id")
    # delta-rs 1.6.6's load_cdf gets a whole-file remove with a DV wrong (it serves the rows
    # the DV marks, not the rows the file still held); the invariant above covers it.
    whole_file_removed = 5 if scenario == "purge_and_whole_file" else None
    assert_raw_is_load_cdf(spark, path, last=whole_file_removed and whole_file_removed - 1)


def test_a_dv_delete_is_just_the_marked_rows(spark: SparkSession, tmp_path: Path) -> None:
    """No carry-overs: the raw feed of a DV DELETE/UPDATE holds only the changed rows."""
    path = dv_scenario(tmp_path, "dml")
    raw = spark.read.format("delta_changelog").options(startingVersion=2, endingVersion=3)
    got = sorted(
        (r.id, r.name, r._change_type, r._commit_version) for r in raw.load(path).collect()
    )
    assert got == [
        (2, "a2", "delete", 2),
        (3, "a3", "delete", 2),
        (5, "a5", "delete", 3),
        (5, "u5", "insert", 3),
    ]


@pytest.mark.parametrize("scenario", ["dml", "partitioned"])
def test_dv_streams_equal_batch(
    spark: SparkSession, tmp_path: Path, query_name: str, scenario: str
) -> None:
    path = dv_scenario(tmp_path, scenario)
    assert_stream_equals_batch(spark, path, "id", query_name, startingVersion=0)


@pytest.mark.parametrize("scenario", ["dml", "partitioned"])
def test_initial_snapshot_applies_every_dv(
    spark: SparkSession, tmp_path: Path, query_name: str, scenario: str
) -> None:
    path = dv_scenario(tmp_path, scenario)
    reader = ChangelogReader(spark, streaming=True).options(rowId="id", **PROCESSED)
    query = reader.changes(path).writeStream.format("memory").queryName(query_name).start()
    query.processAllAvailable()
    query.stop()
    got = Counter((r.id, r.name) for r in spark.table(query_name).collect())
    assert got == rs_snapshot(path, DeltaTable(path).version(), ["id", "name"])
    assert {r._change_type for r in spark.table(query_name).collect()} == {"insert"}


def test_a_damaged_dv_names_its_file_and_version(spark: SparkSession, tmp_path: Path) -> None:
    path = dv_scenario(tmp_path, "dml")
    dv_file = next((Path(path) / "ab").glob("deletion_vector_*.bin"))
    data = bytearray(dv_file.read_bytes())
    data[-1] ^= 0xFF  # the checksum
    dv_file.write_bytes(bytes(data))
    with pytest.raises(Exception, match=r"UNREADABLE_DELETION_VECTOR.*deletion_vector_.*version"):
        spark.read.format("delta_changelog").load(path).collect()


# -- tables written by Delta Spark / Databricks -----------------------------------------------


@pytest.mark.parametrize("name", ["table-with-dv-small", "cdf-table-with-dv"])
def test_dv_fixtures_batch_and_stream(
    spark: SparkSession, tmp_path: Path, query_name: str, name: str
) -> None:
    path = copy_fixture(tmp_path, name)
    assert_every_version(spark, path, "value")
    if DeltaTable(path).metadata().configuration.get("delta.enableChangeDataFeed") == "true":
        assert_raw_is_load_cdf(spark, path)
    assert_stream_equals_batch(spark, path, "value", query_name, startingVersion=0)


def test_a_missing_dv_file_is_data_loss(spark: SparkSession, tmp_path: Path) -> None:
    path = dv_scenario(tmp_path, "dml")
    for dv_file in (Path(path) / "ab").glob("deletion_vector_*.bin"):
        dv_file.unlink()
    read = spark.read.format("delta_changelog").options(startingVersion=2, endingVersion=2)
    with pytest.raises(Exception, match=r"DATA_LOSS.*deletion vector file of data file"):
        read.load(path).collect()
