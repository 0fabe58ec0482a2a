"""``iceberg_changelog`` options: the common ones
(``spark_cdc.server_plugin.changefeed.source_options``),
``storage.<KEY>`` as pyiceberg table and FileIO properties, ``branch``, and snapshot ids as
range bounds (``startingSnapshotId`` / ``endingSnapshotId``, which take the bound
inclusiveness options as versions do)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from spark_cdc.server_plugin.changefeed.source_options import (
    STORAGE_PREFIX,
    OptionSet,
    SourceOptions,
    parse_source_options,
)
from spark_cdc.server_plugin.errors import error

SOURCE = "iceberg_changelog"
STARTING_SNAPSHOT, ENDING_SNAPSHOT = "startingSnapshotId", "endingSnapshotId"
CATALOG_PREFIX = "catalog."
ACCEPTED = OptionSet(
    SOURCE,
    own=("branch", STARTING_SNAPSHOT, ENDING_SNAPSHOT),
    prefixes=(
        (STORAGE_PREFIX, "pyiceberg table and FileIO properties"),
        (CATALOG_PREFIX, "pyiceberg catalog properties (the path is then a table name)"),
    ),
    finds_row_id=True,  # the table's identifier fields
)


@dataclass(frozen=True)
class IcebergOptions:
    common: SourceOptions
    branch: str = "main"
    starting_snapshot: int | None = None
    ending_snapshot: int | None = None

    @property
    def catalog(self) -> dict[str, str]:
        """pyiceberg catalog properties; given, the path is a table name in that catalog."""
        return self.common.families.get(CATALOG_PREFIX, {})


def parse_iceberg_options(raw: Mapping[str, str], streaming: bool = False) -> IcebergOptions:
    common = parse_source_options(raw, ACCEPTED, streaming)
    own = common.own
    starting, ending = _snapshot_id(own, STARTING_SNAPSHOT), _snapshot_id(own, ENDING_SNAPSHOT)
    if streaming and ending is not None:
        raise error("INVALID_CDC_OPTION.ENDING_BOUND_IN_STREAM")
    if (starting is not None and common.has_start) or (ending is not None and common.has_end):
        raise error("INVALID_CDC_OPTION.SNAPSHOT_ID_WITH_OTHER_BOUNDS")
    branch = own.get("branch", "main").strip() or "main"
    return IcebergOptions(common, branch, starting, ending)


def _snapshot_id(own: Mapping[str, str], name: str) -> int | None:
    if name not in own:
        return None
    text = own[name].strip()
    try:
        return int(text)
    except ValueError:
        raise error(
            "INVALID_CDC_OPTION.INVALID_SNAPSHOT_ID", option=name, value=own[name]
        ) from None
