"""Every fixture's main branch as a changelog's commits: the ancestry oldest first, each
snapshot's sequence number as its version (v1: its position), timestamps strictly
increasing, and the expired table's gap said."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from spark_cdc.server_plugin.errors import ChangelogSourceError
from spark_cdc.server_plugin.iceberg.table import open_table
from spark_cdc.server_plugin.iceberg.timeline import timeline

from tests.support.iceberg_fixtures import FOLDERS, ICEBERG_FIXTURES, each, table_named
from tests.support.iceberg_io import storage_options

EXPECTED = ICEBERG_FIXTURES / "expected_snapshots.json"


def _ancestry(metadata: dict, head: int) -> list[dict]:
    """The chain from the metadata JSON itself, oldest first."""
    by_id = {s["snapshot-id"]: s for s in metadata["snapshots"]}
    chain, at = [], by_id.get(head)
    while at is not None:
        chain.append(at)
        at = by_id.get(at.get("parent-snapshot-id"))
    return chain[::-1]


@pytest.mark.parametrize("folder", each(FOLDERS), ids=lambda p: p.name)
def test_the_main_branch_is_its_ancestry_with_sequence_numbers_as_versions(folder: Path) -> None:
    table = open_table(str(folder), storage_options(folder))
    got = timeline(table.metadata)
    raw = json.loads(Path(table.metadata_location).read_text())
    chain = _ancestry(raw, raw["current-snapshot-id"])
    assert [t.snapshot.timestamp_ms for t in got.snapshots] == [s["timestamp-ms"] for s in chain]
    assert [t.operation for t in got.snapshots] == [s["summary"]["operation"] for s in chain]
    if raw["format-version"] == 1:
        assert [t.version for t in got.snapshots] == list(range(1, len(chain) + 1))
    else:
        assert [t.version for t in got.snapshots] == [s["sequence-number"] for s in chain]
    stamps = [t.timestamp_ms for t in got.snapshots]
    assert all(a < b for a, b in itertools.pairwise(stamps))
    assert got.expired_before == (chain[0].get("parent-snapshot-id") is not None)
    assert got.expired_before == (folder.name == "java_eq_pos_deletes_products_expired")


@pytest.mark.parametrize(
    "name", each(sorted(json.loads(EXPECTED.read_text())) if EXPECTED.exists() else [])
)
def test_the_fixtures_snapshots_are_the_expected_ones(name: str) -> None:
    """Snapshot ids compared loosely: one fixture's metadata rounds them (see its README)."""
    expected = json.loads(EXPECTED.read_text())[name]["snapshots"]
    folder = ICEBERG_FIXTURES / name
    got = timeline(open_table(str(folder), storage_options(folder)).metadata).snapshots
    assert [t.snapshot.sequence_number for t in got] == [s["sequence_number"] for s in expected]
    assert [t.operation for t in got] == [s["operation"] for s in expected]


def test_an_unknown_branch_is_refused_by_name() -> None:
    folder = table_named("spark_v3_deletion_vectors")
    metadata = open_table(str(folder), storage_options(folder)).metadata
    with pytest.raises(ChangelogSourceError) as refused:
        timeline(metadata, "nope", table=str(folder))
    assert refused.value.condition == "ICEBERG_CHANGELOG.UNKNOWN_BRANCH"
    assert refused.value.parameters == {"path": str(folder), "branch": "nope"}
