"""Opening the Iceberg tables other engines wrote, from their folder or a metadata file,
and the refusals of what is not one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spark_cdc.server_plugin.errors import ChangelogSourceError
from spark_cdc.server_plugin.iceberg.table import open_table

from tests.support.iceberg_fixtures import FOLDERS, each
from tests.support.iceberg_io import storage_options
from tests.support.iceberg_tables import sql_catalog, table_folder


@pytest.mark.parametrize("folder", each(FOLDERS), ids=lambda p: p.name)
def test_a_fixture_opens_from_its_folder_at_the_metadata_its_location_names(folder: Path) -> None:
    expected = json.loads((folder / "location.json").read_text())["metadata_file"]
    table = open_table(str(folder), storage_options(folder))
    assert table.metadata_location == f"{folder}/{expected}"
    assert table.metadata.current_snapshot() is not None
    from_file = open_table(f"{folder}/{expected}", storage_options(folder))
    assert from_file.metadata == table.metadata


def test_a_folder_without_metadata_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "metadata").mkdir()
    (tmp_path / "metadata" / "snap-1.avro").write_bytes(b"")
    for path in (tmp_path, tmp_path / "missing"):
        with pytest.raises(ChangelogSourceError) as refused:
            open_table(str(path), {})
        assert refused.value.condition == "ICEBERG_CHANGELOG.NOT_AN_ICEBERG_TABLE"
        assert refused.value.parameters == {"path": str(path)}


def test_a_metadata_file_that_is_not_one_is_unreadable_by_name(tmp_path: Path) -> None:
    broken = tmp_path / "v1.metadata.json"
    broken.write_text("{not json")
    with pytest.raises(ChangelogSourceError) as refused:
        open_table(str(broken), {})
    assert refused.value.condition == "ICEBERG_CHANGELOG.UNREADABLE_TABLE"


def _folder_with_a_commit_in_flight(tmp_path: Path) -> tuple[Path, Path, bytes]:
    """A table pyiceberg wrote, whose next metadata file exists but is still empty, as a
    writer that creates it in place leaves it for a moment; returns the folder, that file and
    what it will hold."""
    import pyarrow as pa

    catalog = sql_catalog(tmp_path)
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2]}))
    folder = Path(table_folder(table))
    written = Path(table.metadata_location.removeprefix("file://")).read_bytes()
    in_flight = folder / "metadata" / "v999999.metadata.json"
    in_flight.write_bytes(b"")
    return folder, in_flight, written


def test_a_metadata_file_still_being_written_is_read_once_its_writer_finishes(
    tmp_path: Path,
) -> None:
    import threading

    folder, in_flight, written = _folder_with_a_commit_in_flight(tmp_path)
    finish = threading.Timer(0.3, in_flight.write_bytes, (written,))
    finish.start()
    try:
        table = open_table(str(folder), {})
    finally:
        finish.join()
    assert table.metadata_location == str(in_flight)
    assert table.metadata.current_snapshot() is not None


def test_a_metadata_file_that_stays_empty_is_unreadable_by_name(tmp_path: Path) -> None:
    folder, in_flight, _ = _folder_with_a_commit_in_flight(tmp_path)
    with pytest.raises(ChangelogSourceError) as refused:
        open_table(str(folder), {})
    assert refused.value.condition == "ICEBERG_CHANGELOG.UNREADABLE_TABLE"
    assert refused.value.parameters["path"] == str(folder)
    assert refused.value.parameters["reason"].startswith(f"{in_flight.name}: ")
