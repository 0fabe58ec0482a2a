"""Where a snapshot target's rows are read by Spark's Parquet reader instead of the sink's
(``delta.rows.plain_files``): only where the files hold the rows as they are. Over every
conformance Delta table (tables Delta, delta-rs, kernel and others wrote): when files are
offered, reading them with the table's schema (missing columns NULL, as Spark's reader
given a schema reads them) gives exactly the rows the sink reads; deletion vectors,
column mapping and partition values are never offered."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from deltalake import DeltaTable, write_deltalake
from spark_cdc.server_plugin.arrow_types import arrow_schema
from spark_cdc.server_plugin.sinks.apply.delta import rows
from spark_cdc.server_plugin.sinks.apply.engine.spec import ApplySpec

from tests.support.apply_targets import spec_for
from tests.support.delta_fixtures import CONFORMANCE, fixture_dir
from tests.support.snapshot_model import as_bag


def _spec(path: Path) -> ApplySpec:
    return dataclasses.replace(spec_for(str(path.parent), 1), target=str(path))


def _sink_rows(spec: ApplySpec) -> pa.Table:
    schema = rows.schema(spec, None)
    batches = [
        batch
        for part in rows.partitions(spec, None, 1)
        for batch in rows.read(spec, part, schema)  # type: ignore[arg-type]
    ]
    return pa.Table.from_batches(batches, arrow_schema(schema))


def _plain_rows(spec: ApplySpec, files: list[str]) -> pa.Table:
    # INT96 timestamps in microseconds, as Spark reads them.
    parquet = ds.ParquetFileFormat(read_options={"coerce_int96_timestamp_unit": "us"})
    return ds.dataset(files, arrow_schema(rows.schema(spec, None)), format=parquet).to_table()


def _bag(table: pa.Table) -> Any:
    return as_bag(table.to_pylist(), table.column_names)


def test_plain_files_are_the_rows_the_sink_reads_on_every_conformance_table() -> None:
    root = fixture_dir("delta", CONFORMANCE)
    tables = sorted(p.parent for p in root.rglob("_delta_log") if p.is_dir())
    offered, kept = [], []
    for path in tables:
        spec = _spec(path)
        try:
            expected = _sink_rows(spec)
        except Exception:  # a table the sink refuses by name: nothing to compare with
            continue
        plain = rows.plain_files(spec, None)
        table = DeltaTable(str(path))
        if plain is None:
            kept.append(path.name)
            continue
        offered.append(path.name)
        schema, files = plain
        assert schema == rows.schema(spec, None), path
        assert not table.metadata().partition_columns, path
        assert table.metadata().configuration.get("delta.columnMapping.mode", "none") == "none"
        assert sorted(files) == sorted(table.file_uris()), path
        assert _bag(_plain_rows(spec, files)) == _bag(expected), path
    # Both kinds are there: the comparison above ran, and tables were kept for the sink.
    assert len(offered) >= 10, offered
    for name in ("basic-dv-with-checkpoint", "dv-with-columnmapping", "multi_partitioned"):
        assert name in kept, (name, kept)


@pytest.mark.parametrize(
    ("made", "offered"),
    [
        ({}, True),
        ({"partition_by": ["region"]}, False),
        ({"configuration": {"delta.enableDeletionVectors": "true"}}, True),  # none deleted
    ],
)
def test_a_table_written_here_is_offered_unless_its_values_are_elsewhere(
    tmp_path: Path, made: dict[str, Any], offered: bool
) -> None:
    path = tmp_path / "target"
    data = pa.table({"id": [1, 2, 3], "region": ["eu", "us", "eu"]})
    write_deltalake(str(path), data, **made)
    plain = rows.plain_files(_spec(path), None)
    assert (plain is not None) == offered
    if plain is not None:
        assert _bag(_plain_rows(_spec(path), plain[1])) == _bag(data)


def test_a_path_spark_would_read_as_a_pattern_is_not_offered(tmp_path: Path) -> None:
    path = tmp_path / "tar*get"
    write_deltalake(str(path), pa.table({"id": [1]}))
    assert rows.plain_files(_spec(path), None) is None
