"""A FileIO for Iceberg tables read somewhere other than where they were written.

An Iceberg table records absolute paths everywhere (metadata, manifest lists, manifests,
position-delete files), so a table copied to another folder, bucket or machine (a backup
restored, a bucket renamed, test data checked out) cannot be read by them. Chosen with
``storage.py-io-impl`` and given ``storage.location-map`` (a JSON object from recorded
prefix to where those files are now), this FileIO opens each file at its mapped place.
Delete files compare data file paths after mapping too, so deletes written under another
spelling of the same place (a writer's ``hdfs://host/x`` beside the manifests' ``/x``)
still find their rows.
"""

from __future__ import annotations

import json
from typing import Any

from pyiceberg.io.pyarrow import PyArrowFileIO

LOCATION_MAP = "location-map"
IO_IMPL = f"{__name__}.RelocatedFileIO"


class RelocatedFileIO(PyArrowFileIO):
    """pyiceberg's Arrow FileIO, opening files under their mapped prefixes."""

    def __init__(self, properties: Any = None) -> None:
        super().__init__(dict(properties or {}))
        mapping = json.loads(self.properties.get(LOCATION_MAP, "{}"))
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


def relocated(mapping: dict[str, str]) -> dict[str, str]:
    """The storage options that read a table whose recorded prefixes moved as ``mapping``
    says."""
    return {"py-io-impl": IO_IMPL, LOCATION_MAP: json.dumps(mapping)}
