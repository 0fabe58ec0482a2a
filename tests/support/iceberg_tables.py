"""Iceberg tables the tests and benchmarks write with pyiceberg: a SQL catalog of their own
in a folder, and copy-on-write rewrites in one snapshot (pyiceberg's own overwrite and
upsert commit a delete and an append as two snapshots)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa


def catalog_properties(folder: Path, name: str = "tests") -> dict[str, str]:
    return {
        "name": name,
        "type": "sql",
        "uri": f"sqlite:///{folder}/catalog.db",
        "warehouse": f"file://{folder}/warehouse",
    }


def sql_catalog(folder: Path, name: str = "tests") -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    properties = catalog_properties(folder, name)
    return SqlCatalog(name, uri=properties["uri"], warehouse=properties["warehouse"])


def orders_table(catalog: Any) -> Any:
    """``db.orders`` made in ``catalog``: ``id`` (required, its identifier field) and
    ``name``."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    catalog.create_namespace("db")
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "name", StringType(), required=False),
        identifier_field_ids=[1],
    )
    return catalog.create_table("db.orders", schema)


def table_folder(table: Any) -> str:
    return str(table.location()).removeprefix("file://")


def rewrite(table: Any, rows: pa.Table) -> None:
    """One copy-on-write snapshot: every live data file out, ``rows`` in."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    live = [task.file for task in table.scan().plan_files()]
    with (
        table.transaction() as transaction,
        transaction.update_snapshot().overwrite() as snapshot,
    ):
        for data_file in live:
            snapshot.delete_data_file(data_file)
        if not rows.num_rows:  # pyiceberg divides by the row count
            return
        for data_file in _dataframe_to_data_files(
            transaction.table_metadata, rows, table.io, snapshot.commit_uuid
        ):
            snapshot.append_data_file(data_file)


def equality_delete(table: Any, keys: pa.Table) -> None:
    """One merge-on-read snapshot that deletes every row whose ``keys`` columns equal one
    of ``keys``' rows: an equality-delete file (Flink's upserts write them; pyiceberg
    cannot), written by hand following the spec. The table must be v2 and unpartitioned:
    the delete file is parquet with the columns' field ids, listed in a delete manifest
    beside the current snapshot's manifests."""
    import time
    import uuid

    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyiceberg.conversions import to_bytes
    from pyiceberg.manifest import (
        DataFile,
        DataFileContent,
        FileFormat,
        ManifestContent,
        ManifestEntry,
        ManifestEntryStatus,
        ManifestWriterV2,
        write_manifest_list,
    )
    from pyiceberg.table.snapshots import Operation, Snapshot, Summary
    from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetSnapshotRefUpdate
    from pyiceberg.typedef import Record

    class DeleteManifestWriter(ManifestWriterV2):
        def content(self) -> ManifestContent:
            return ManifestContent.DELETES

    metadata = table.metadata
    assert metadata.format_version == 2 and metadata.spec().is_unpartitioned()
    schema = metadata.schema()
    field_ids = [schema.find_field(name).field_id for name in keys.column_names]
    parent = metadata.current_snapshot()
    snapshot_id = uuid.uuid4().int >> 65
    sequence = metadata.last_sequence_number + 1
    location = str(table.location()).removeprefix("file://")
    unique = uuid.uuid4().hex
    path = f"{location}/data/eq-deletes-{unique}.parquet"
    with_ids = pa.schema(
        [
            pa.field(n, keys.schema.field(n).type, metadata={"PARQUET:field_id": str(i)})
            for n, i in zip(keys.column_names, field_ids, strict=True)
        ]
    )
    pq.write_table(keys.cast(with_ids), path)
    bounds = {}
    for column, field_id in zip(keys.column_names, field_ids, strict=True):
        kind = schema.find_field(field_id).field_type
        span = pc.min_max(keys.column(column))
        if span["min"].is_valid:
            bounds[field_id] = (
                to_bytes(kind, span["min"].as_py()),
                to_bytes(kind, span["max"].as_py()),
            )
    delete_file = DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES,
        file_path=f"file://{path}",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=keys.num_rows,
        file_size_in_bytes=Path(path).stat().st_size,
        equality_ids=field_ids,
        value_counts={i: keys.num_rows for i in field_ids},
        null_value_counts={
            i: keys.column(n).null_count for n, i in zip(keys.column_names, field_ids, strict=True)
        },
        lower_bounds={i: low for i, (low, _) in bounds.items()},
        upper_bounds={i: high for i, (_, high) in bounds.items()},
    )
    delete_file.spec_id = metadata.default_spec_id
    manifest_path = f"{location}/metadata/{unique}-m0.avro"
    with DeleteManifestWriter(
        metadata.spec(), schema, table.io.new_output(manifest_path), snapshot_id, "deflate"
    ) as writer:
        writer.add_entry(
            ManifestEntry.from_args(
                status=ManifestEntryStatus.ADDED,
                snapshot_id=snapshot_id,
                data_file=delete_file,
            )
        )
    manifests = [writer.to_manifest_file(), *parent.manifests(table.io)]
    list_path = f"{location}/metadata/snap-{snapshot_id}-1-{unique}.avro"
    with write_manifest_list(
        2, table.io.new_output(list_path), snapshot_id, parent.snapshot_id, sequence, "deflate"
    ) as manifest_list:
        manifest_list.add_manifests(manifests)
    snapshot = Snapshot(
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent.snapshot_id,
        sequence_number=sequence,
        timestamp_ms=max(parent.timestamp_ms + 1, int(time.time() * 1000)),
        manifest_list=f"file://{list_path}",
        summary=Summary(
            Operation.DELETE,
            **{"added-delete-files": "1", "added-equality-delete-files": "1"},
        ),
        schema_id=schema.schema_id,
    )
    with table.transaction() as transaction:
        transaction._apply(
            (
                AddSnapshotUpdate(snapshot=snapshot),
                SetSnapshotRefUpdate(
                    snapshot_id=snapshot_id,
                    parent_snapshot_id=parent.snapshot_id,
                    ref_name="main",
                    type="branch",
                ),
            ),
            (AssertRefSnapshotId(snapshot_id=parent.snapshot_id, ref="main"),),
        )
