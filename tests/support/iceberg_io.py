"""A FileIO for the Iceberg fixtures (``py-io-impl``): their metadata holds the absolute paths
they were written at (``hdfs://...``, ``/test-warehouse/...``), which this maps to the folder
the fixture is read from, as each fixture's ``location.json`` says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyiceberg.io.pyarrow import PyArrowFileIO

PREFIX_MAP = "fixture.prefix-map"


class PrefixMappingFileIO(PyArrowFileIO):
    """Opens files under a local folder in place of the prefixes recorded for it."""

    def __init__(self, properties: Any = None) -> None:
        super().__init__(dict(properties or {}))
        mapping = json.loads(self.properties.get(PREFIX_MAP, "{}"))
        self._prefixes = sorted(mapping.items(), key=lambda item: -len(item[0]))

    def map_location(self, location: str) -> str:
        for source, local in self._prefixes:
            if location.startswith(source):
                return local + location[len(source) :]
        return location

    def new_input(self, location: str) -> Any:
        return super().new_input(self.map_location(location))

    def new_output(self, location: str) -> Any:
        return super().new_output(self.map_location(location))


def storage_options(folder: Path) -> dict[str, str]:
    """The ``storage.*`` options that read the fixture in ``folder`` in place."""
    location = json.loads((folder / "location.json").read_text())
    mapping = {
        source: str(folder) if local == "." else str(folder / local)
        for source, local in location["prefix_map"].items()
    }
    return {
        "py-io-impl": f"{__name__}.{PrefixMappingFileIO.__name__}",
        PREFIX_MAP: json.dumps(mapping),
    }
