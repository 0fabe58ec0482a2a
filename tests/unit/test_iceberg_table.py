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
