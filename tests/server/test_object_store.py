"""The sources and apply_changes on an object store: moto's S3 server (a real S3 endpoint
that enforces conditional writes; ``tests/support/object_store.py``). A Delta table in S3
is read as a change feed and applied into Delta targets in S3, and a stream into an Iceberg
target whose warehouse is in S3 (a SQL catalog on SQLite) equals the same stream into a
local warehouse, merging on read (its position delete files in S3) or not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession
from spark_cdc import apply_changes, readStream
from spark_cdc.server_plugin.iceberg.table import catalog_from

from tests.support import harness
from tests.support.apply_targets import (
    feed_changes,
    model_rows,
    read_iceberg,
    read_table,
    sorted_rows,
)
from tests.support.object_store import S3, docker_gateway, moto_server


@pytest.fixture(scope="module")
def s3(spark_remote: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3]:
    host = docker_gateway() if harness.kind == "container" else "127.0.0.1"
    with moto_server(host, tmp_path_factory.mktemp("moto") / "moto.log") as server:
        yield server


def _history(path: str, options: dict[str, str]) -> None:
    """A Delta table of several commits: inserts, updates by merge, a delete."""
    write_deltalake(
        path,
        pa.table({"id": list(range(6)), "v": [f"v{i}" for i in range(6)]}),
        storage_options=options,
    )
    for step in range(1, 5):
        table = DeltaTable(path, storage_options=options)
        updates = pa.table({"id": [step % 6, 10 + step], "v": [f"u{step}", f"n{step}"]})
        table.merge(
            updates, "t.id = s.id", source_alias="s", target_alias="t"
        ).when_matched_update_all().when_not_matched_insert_all().execute()
    DeltaTable(path, storage_options=options).delete("id = 3")


def _stream(
    spark: SparkSession,
    source: str,
    source_options: dict[str, str],
    target: str,
    checkpoint: str,
    scd_type: int,
    **more: Any,
) -> None:
    reader = readStream(spark).options(**{f"storage.{k}": v for k, v in source_options.items()})
    feed = (
        reader.option("rowId", "id").option("computeUpdates", True).option("maxFilesPerTrigger", 2)
    )
    query = apply_changes(
        feed.option("startingVersion", 0).load(source),
        target,
        keys=["id"],
        sequence_by="_commit_version",
        stored_as_scd_type=scd_type,
        checkpoint_location=checkpoint,
        **more,
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def test_a_delta_feed_in_s3_applied_into_delta_targets_in_s3(
    spark: SparkSession, s3: S3, tmp_path: Path
) -> None:
    bucket = s3.bucket()
    options = s3.delta_options
    source = f"s3://{bucket}/orders"
    _history(source, options)
    changes = feed_changes(spark, source, **{f"storage.{k}": v for k, v in options.items()})
    for scd_type in (1, 2):
        target = f"s3://{bucket}/orders_{scd_type}"
        _stream(
            spark,
            source,
            options,
            target,
            str(tmp_path / f"cp-{scd_type}"),
            scd_type,
            storage_options=options,
        )
        got = read_table(target, options)
        assert sorted_rows(got) == model_rows(changes, scd_type), f"type {scd_type}"


def test_an_iceberg_target_in_s3_equals_one_in_a_local_warehouse(
    spark: SparkSession, s3: S3, tmp_path: Path
) -> None:
    source = str(tmp_path / "orders")
    _history(source, {})
    local = {
        "name": "local",
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/local.db",
        "warehouse": f"file://{tmp_path}/warehouse",
    }
    remote = {
        "name": "remote",
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/remote.db",
        "warehouse": f"s3://{s3.bucket()}/warehouse",
        **s3.iceberg_properties,
    }
    expected = model_rows(feed_changes(spark, source), 2)
    merging = {"write.merge.mode": "merge-on-read"}  # its position delete files in S3 too
    for name, catalog, table, properties in (
        ("local", local, "db.history", {}),
        ("remote", remote, "db.history", {}),
        ("remote, merge-on-read", remote, "db.merged", merging),
    ):
        _stream(
            spark,
            source,
            {},
            table,
            str(tmp_path / f"cp-{table}-{catalog['name']}"),
            2,
            format="iceberg",
            catalog=catalog,
            table_properties=properties,
        )
        assert sorted_rows(read_iceberg(catalog, table)) == expected, name
    summary = catalog_from(remote).load_table("db.merged").current_snapshot().summary
    assert int(summary.additional_properties["total-position-deletes"]) > 0
