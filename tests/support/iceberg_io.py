"""The storage options that read an Iceberg fixture in place: their metadata holds the
absolute paths they were written at (``hdfs://...``, ``/test-warehouse/...``), which
``location.json`` maps to the fixture's folder."""

from __future__ import annotations

import json
from pathlib import Path

from spark_cdc.server_plugin.iceberg.relocated_io import relocated


def storage_options(folder: Path) -> dict[str, str]:
    location = json.loads((folder / "location.json").read_text())
    return relocated(
        {
            source: str(folder) if local == "." else str(folder / local)
            for source, local in location["prefix_map"].items()
        }
    )
