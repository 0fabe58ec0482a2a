"""startingVersion=earliest: the first version whose changes can still be read, for tables
whose early log was cleaned up (checkpoint-cdf-table, written by Delta Spark: commits 0-2
gone below a checkpoint at 3), batch and streaming."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import write_deltalake
from pyspark.sql import SparkSession
from spark_cdc import ChangelogReader

from tests.support.changelog_invariants import (
    assert_every_version,
    assert_raw_is_load_cdf,
    assert_stream_equals_batch,
)
from tests.support.delta_fixtures import copy_fixture
from tests.support.delta_tables import log_cleaned_up_before_version_2, rows
from tests.support.feeds import collect_rows


def test_checkpoint_cdf_table_from_earliest(
    spark: SparkSession, tmp_path: Path, query_name: str
) -> None:
    path = copy_fixture(tmp_path, "checkpoint-cdf-table")
    with pytest.raises(Exception, match=r"DELTA_CHANGELOG\.DATA_LOSS"):
        ChangelogReader(spark).changes(path).collect()
    earliest = ChangelogReader(spark).option("startingVersion", "earliest").changes(path)
    assert sorted({r._commit_version for r in earliest.collect()}) == [3, 4, 5]
    assert collect_rows(earliest) == collect_rows(
        ChangelogReader(spark).option("startingVersion", 3).changes(path)
    )
    assert_every_version(spark, path, "id", first=4)  # snapshot 2 is gone: from 4 on
    assert_raw_is_load_cdf(spark, path, first=3)
    assert_stream_equals_batch(spark, path, "id", query_name, startingVersion="earliest")


def test_earliest_on_a_cleaned_up_log_and_a_full_one(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    log_cleaned_up_before_version_2(path)
    read = spark.read.format("delta_changelog").option("startingVersion", "earliest")
    assert sorted((r.id, r._commit_version) for r in read.load(path).collect()) == [(2, 2), (3, 3)]
    full = str(tmp_path / "full")
    write_deltalake(full, rows(range(2)))
    got = ChangelogReader(spark).options(startingVersion="earliest", endingVersion=0)
    assert sorted(r.id for r in got.changes(full).collect()) == [0, 1]
