"""What each snapshot added and removed, from its own manifests: the parent's live files
follow from them exactly (checked against the parent's own manifests), deletion vectors
sharing a Puffin file stay apart, and the expired table's oldest snapshot has changes."""

from __future__ import annotations

from pathlib import Path

import pytest
from spark_cdc.server_plugin.iceberg.manifests import snapshot_files
from spark_cdc.server_plugin.iceberg.table import open_table
from spark_cdc.server_plugin.iceberg.timeline import timeline

from tests.support.iceberg_fixtures import FOLDERS, each, table_named
from tests.support.iceberg_io import storage_options


def _summary_count(snapshot: object, name: str) -> int:
    return int(snapshot.summary.additional_properties.get(name, 0))  # type: ignore[attr-defined]


@pytest.mark.parametrize("folder", each(FOLDERS), ids=lambda p: p.name)
def test_a_snapshots_own_manifests_give_its_parents_files(folder: Path) -> None:
    table = open_table(str(folder), storage_options(folder))
    previous = None
    for timed in timeline(table.metadata).snapshots:
        files = snapshot_files(timed.snapshot, table.io)
        if previous is not None:
            assert files.parent_live().keys() == previous.keys()
        previous = files.live
        snapshot = timed.snapshot
        data = [e for e in files.added.values() if e.content == 0]
        deletes = [e for e in files.added.values() if e.content != 0]
        assert len(data) == _summary_count(snapshot, "added-data-files")
        assert len(deletes) == _summary_count(snapshot, "added-delete-files")
        removed_data = [e for e in files.removed.values() if e.content == 0]
        assert len(removed_data) == _summary_count(snapshot, "deleted-data-files")


def test_deletion_vectors_in_one_puffin_file_are_two_files() -> None:
    folder = table_named("spark_v3_deletion_vectors")
    table = open_table(str(folder), storage_options(folder))
    delete = timeline(table.metadata).snapshots[-1].snapshot
    vectors = [e for e in snapshot_files(delete, table.io).added.values() if e.content == 1]
    assert len(vectors) == 2
    assert len({v.path for v in vectors}) == 1
    assert len({v.referenced_data_file for v in vectors}) == 2
    assert all(v.content_offset is not None and v.content_size for v in vectors)
