"""An Iceberg target that asks for merge-on-read (``write.merge.mode``): the rows a batch
replaces are marked deleted by position delete files, one per data file and scoped to it,
no data file rewritten; what is written opens in pyiceberg, polars and DuckDB; a target switched
back to copy-on-write drops the delete files of the files it rewrites; a mode that cannot
be served is refused by name before anything is written; a data file another writer
removes between the batch's read and its commit is a conflict, not a lost delete."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from spark_cdc.server_plugin.errors import ChangelogSourceError
from spark_cdc.server_plugin.iceberg.table import catalog_from
from spark_cdc.server_plugin.sinks.apply.iceberg import deletes as iceberg_deletes
from spark_cdc.server_plugin.sinks.apply.iceberg import rewrites as iceberg_rewrites
from spark_cdc.server_plugin.sinks.apply.task import apply_batch

from tests.support.apply_feeds import MODEL, batches, expected, feeds
from tests.support.apply_model import Change
from tests.support.apply_targets import prepared, read_iceberg, sorted_rows, spec_for
from tests.support.duckdb_tables import iceberg_rows

MERGE_ON_READ = {"write.merge.mode": "merge-on-read"}


def _table(spec: Any) -> Any:
    return catalog_from(dict(spec.catalog)).load_table(spec.target)


def _summaries(table: Any) -> list[dict[str, str]]:
    return [s.summary.additional_properties for s in table.metadata.snapshots]


def _delete_files(table: Any) -> list[tuple[Any, list[Any]]]:
    """Each data file of the current snapshot and the delete files pyiceberg applies to it."""
    return [(t.file, list(t.delete_files)) for t in table.scan().plan_files()]


def _as_pyiceberg_reads(table: Any, rows: pa.Table) -> list[dict[str, Any]]:
    """``rows`` another reader read, in the types pyiceberg reads (``read_iceberg``)."""
    return sorted_rows(rows.cast(read_iceberg(dict(table.catalog.properties), table.name()).schema))


@MODEL
@given(data=st.data(), scd_type=st.sampled_from([1, 2]))
def test_replaced_rows_are_marked_deleted_one_delete_file_per_data_file(
    data: st.DataObject, scd_type: int
) -> None:
    """After the first batch no batch removes a data file; every data file has at most one
    delete file, whose path bounds name it alone; the snapshot's counts are the delete
    files'; pyiceberg, polars and DuckDB read the model's rows. The rows replaced are
    found by the files' key indexes, or (a second schema) by reading their key columns."""
    changes = data.draw(feeds(truncates=False))
    parts = data.draw(batches(changes))
    second_schema = data.draw(st.booleans())  # the files' keys read by pyiceberg instead
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type, iceberg=True, table_properties=MERGE_ON_READ)
        for version, part in enumerate(parts):
            apply_batch(spec, prepared(part), version)
            if second_schema and version == 0:
                with _table(spec).update_schema() as change:
                    change.update_column("id", doc="a schema of its own")
        table = _table(spec)
        assert all(s.get("deleted-data-files", "0") == "0" for s in _summaries(table))
        marked = [(f, d) for f, d in _delete_files(table) if d]
        for data_file, deletes in marked:
            assert len(deletes) == 1 and iceberg_deletes.scoped_to(deletes[0], data_file)
        summary = _summaries(table)[-1]
        assert int(summary["total-delete-files"]) == len(marked)
        assert int(summary["total-position-deletes"]) == sum(d[0].record_count for _, d in marked)
        want = expected(changes, spec)
        assert sorted_rows(read_iceberg(dict(spec.catalog), spec.target)) == want
        assert _as_pyiceberg_reads(table, pl.scan_iceberg(table).collect().to_arrow()) == want
        assert _as_pyiceberg_reads(table, iceberg_rows(table.metadata_location)) == want


def test_a_target_switched_to_copy_on_write_drops_the_delete_files_it_rewrites() -> None:
    rows = [Change((k,), (1,), "upsert", {"a": k, "b": "x"}) for k in range(30)]
    later = [Change((k,), (2,), "upsert", {"a": -k}) for k in (3, 7)]
    last = [Change((k,), (3,), "upsert", {"a": 0}) for k in (4, 40)]
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, iceberg=True, table_properties=MERGE_ON_READ)
        apply_batch(spec, prepared(rows), 0)
        apply_batch(spec, prepared(later), 1)
        assert _summaries(_table(spec))[-1]["total-delete-files"] == "1"
        with _table(spec).transaction() as change:
            change.set_properties({"write.merge.mode": "copy-on-write"})
        apply_batch(spec, prepared(last), 2)
        table = _table(spec)
        summary = _summaries(table)[-1]
        assert (summary["total-delete-files"], summary["removed-delete-files"]) == ("0", "1")
        assert not any(d for _, d in _delete_files(table))
        assert sorted_rows(read_iceberg(dict(spec.catalog), spec.target)) == expected(
            rows + later + last, spec
        )


@pytest.mark.parametrize(
    ("properties", "made"),
    [
        ({"write.merge.mode": "merge-on-read", "format-version": "1"}, False),
        ({"write.merge.mode": "merge-on-read", "format-version": "1"}, True),
        ({"write.merge.mode": "merge-on-write"}, False),
        ({"write.merge.mode": "merge-on-write"}, True),
    ],
    ids=["v1 asked", "v1 table", "unknown asked", "unknown table"],
)
def test_a_mode_that_cannot_be_served_is_refused_before_anything_is_written(
    properties: dict[str, str], made: bool
) -> None:
    """Asked for the target the first batch makes, or set on a target made before: the
    batch is refused by name, and the catalog holds what it held."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, iceberg=True, table_properties={} if made else properties)
        catalog = catalog_from(dict(spec.catalog))
        catalog.create_namespace("db")
        if made:
            schema = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("b", pa.string())])
            catalog.create_table(spec.target, schema, properties=properties)
        with pytest.raises(ChangelogSourceError) as refused:
            apply_batch(spec, prepared([Change((1,), (1,), "upsert", {"a": 1})]), 0)
        assert refused.value.condition == "APPLY_CHANGES.UNSUPPORTED_WRITE_MODE"
        assert refused.value.parameters["property"] == "write.merge.mode"
        assert catalog.list_tables("db") == ([("db", "target")] if made else [])
        assert not list(Path(folder).rglob("*.parquet"))


def test_a_data_file_another_writer_removes_before_the_commit_is_a_conflict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The batch marks a row of a file that another writer rewrites (a compaction, a
    delete) after the batch read it: its positions would name a file no longer there, so
    the batch is refused with nothing of it written."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, iceberg=True, table_properties=MERGE_ON_READ)
        apply_batch(spec, prepared([Change((k,), (1,), "upsert", {"a": k}) for k in range(5)]), 0)
        other = _table(spec)
        planned = iceberg_rewrites._candidates

        def interleaved(table: Any, declared: Any) -> list[Any]:
            from pyiceberg.expressions import EqualTo

            found = planned(table, declared)
            other.delete(EqualTo("id", 4))  # pyiceberg rewrites the file without it
            return found

        monkeypatch.setattr(iceberg_rewrites, "_candidates", interleaved)
        with pytest.raises(ChangelogSourceError) as refused:
            apply_batch(spec, prepared([Change((2,), (2,), "upsert", {"a": 20})]), 1)
        assert refused.value.condition == "APPLY_CHANGES.CONCURRENT_WRITE"
        want = [{"id": k, "a": k, "b": None} for k in range(4)]
        assert sorted_rows(read_iceberg(dict(spec.catalog), spec.target)) == sorted_rows(
            pa.Table.from_pylist(want)
        )
