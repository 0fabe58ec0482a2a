"""The current metadata file of a table folder: every fixture's (its location.json names
it), and the naming schemes and hints the writers use."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from spark_cdc.server_plugin.iceberg.metadata_files import current_metadata, metadata_version

from tests.support.iceberg_fixtures import FOLDERS, each, require_tables


@pytest.mark.parametrize("folder", each(FOLDERS), ids=lambda p: p.name)
def test_every_fixtures_current_metadata_is_the_one_its_location_names(folder: Path) -> None:
    names = os.listdir(folder / "metadata")
    hints = [folder / "metadata" / n for n in names if n.startswith("version-hint")]
    hint = hints[0].read_text() if hints else None
    expected = json.loads((folder / "location.json").read_text())["metadata_file"]
    assert f"metadata/{current_metadata(names, hint)}" == expected


def test_the_fixtures_are_there() -> None:
    require_tables()


@pytest.mark.parametrize(
    ("names", "hint", "current"),
    [
        (["v1.metadata.json", "v2.metadata.json", "v10.metadata.json"], "2", "v10.metadata.json"),
        (["v1.metadata.json", "v2.gz.metadata.json"], None, "v2.gz.metadata.json"),
        (["v3.metadata.json", "v3.metadata.json.gz"], "3", "v3.metadata.json"),
        (
            ["00000-6f1c.metadata.json", "00001-a2b9.metadata.json", "snap-1-1-x.avro"],
            None,
            "00001-a2b9.metadata.json",
        ),
        (["version-hint.text", "snap-1.avro", "x.metadata.json"], "1", None),
        (["v1.metadata.json", "v2.metadata.json"], "", "v2.metadata.json"),
    ],
)
def test_the_newest_numbered_file_wins_over_a_stale_or_empty_hint(
    names: list[str], hint: str | None, current: str | None
) -> None:
    assert current_metadata(names, hint) == current


def test_names_that_are_not_metadata_files_have_no_version() -> None:
    assert metadata_version("v7.metadata.json") == 7
    assert metadata_version("00012-0a1b2c3d-aaaa-bbbb-cccc-0123456789ab.metadata.json") == 12
    for name in ("version-hint.text", "snap-1-1-abc.avro", "v1.metadata.jsonx", "vx.metadata.json"):
        assert metadata_version(name) is None
