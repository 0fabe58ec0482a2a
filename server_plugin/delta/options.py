"""``delta_changelog`` options: Spark's CDC range names plus Delta's streaming ones, the
row-level passes the source resolves itself, and how widely it reads.

Options reach a Python data source as strings, case-insensitively; a misspelt one fails
instead of being ignored. ``storage.<KEY>`` options go to delta-rs as storage options
(object-store credentials and the like).

The row-level passes take Spark's names: ``deduplicationMode`` (``none`` or
``dropCarryovers``) and ``computeUpdates``, with ``rowId`` naming the row id. Without either
of the first two the source serves the raw feed, as it always has; with one of them it
resolves carry-overs and updates per commit (``spark_cdc.server_plugin.row_level``). Net
changes span commits and stay with the client's stateful operator.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_cdc.server_plugin import cdc_options
from spark_cdc.server_plugin.cdc_options import NULLABLE_SCHEMA, ROW_ID, CdcRequest
from spark_cdc.server_plugin.delta.timeline import parse_timestamp_ms
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.vocabulary import RANGE_OPTIONS

SOURCE = "delta_changelog"
DEFAULT_MAX_FILES = 1000
STORAGE_PREFIX = "storage."
# What ChangelogReader passes when the source resolves the row-level passes (postProcessing
# "source"), besides the internal NULLABLE_SCHEMA (``spark_cdc.server_plugin.cdc_options``).
RESOLUTION_OPTIONS = (ROW_ID, "deduplicationMode", "computeUpdates")
OPTION_NAMES = (
    "path",
    *RANGE_OPTIONS,
    "maxFilesPerTrigger",
    "maxBytesPerTrigger",
    "failOnDataLoss",
    "parallelism",
    "resolveTaskBytes",
    *RESOLUTION_OPTIONS,
)
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class SourceOptions:
    path: str
    storage: dict[str, str] = field(default_factory=dict)
    starting_version: int | None = None
    starting_latest: bool = False
    starting_earliest: bool = False  # the first version whose commit file is still there
    ending_version: int | None = None
    starting_timestamp_ms: int | None = None
    ending_timestamp_ms: int | None = None
    starting_inclusive: bool = True
    ending_inclusive: bool = True
    max_files: int | None = None
    max_bytes: int | None = None
    fail_on_data_loss: bool = True
    parallelism: int | None = None  # None: the driver's cores
    resolve_task_bytes: int | None = None  # None: partitions.RESOLVE_BYTES
    # The row-level passes to resolve; row_id is as given (resolved against the schema by
    # the reader), None: rows are identified by their whole content.
    row_id: tuple[str, ...] | None = None
    drop_carryovers: bool = False
    compute_updates: bool = False
    nullable_schema: bool = False

    @property
    def resolves(self) -> bool:
        return self.drop_carryovers or self.compute_updates

    @property
    def has_start(self) -> bool:
        return (
            self.starting_version is not None
            or self.starting_latest
            or self.starting_earliest
            or self.starting_timestamp_ms is not None
        )

    @property
    def file_limit(self) -> int | None:
        """Delta's rule: 1000 files per micro-batch unless only a byte limit is given."""
        if self.max_files is None and self.max_bytes is None:
            return DEFAULT_MAX_FILES
        return self.max_files

    @property
    def has_end(self) -> bool:
        return self.ending_version is not None or self.ending_timestamp_ms is not None


def parse_source_options(raw: Mapping[str, str], streaming: bool = False) -> SourceOptions:
    """The options, checked by the validator the client shares
    (``spark_cdc.server_plugin.cdc_options``: Spark's order, a stream's end bound first),
    then the source's own."""
    given: dict[str, str] = {}
    storage: dict[str, str] = {}
    for key, value in raw.items():
        if key.lower().startswith(STORAGE_PREFIX):
            storage[key[len(STORAGE_PREFIX) :]] = value
        else:
            given[key] = str(value)
    families = f" and {STORAGE_PREFIX}<KEY> for delta-rs storage options"
    given = cdc_options.canonical(given, (*OPTION_NAMES, NULLABLE_SCHEMA), SOURCE, families)
    if not given.get("path"):
        raise error("INVALID_CDC_OPTION.MISSING_PATH", source=SOURCE)
    cdc = cdc_options.check_cdc_options(
        given, _timestamp_ms, streaming, named_versions=("latest", "earliest")
    )
    return SourceOptions(
        path=given["path"],
        storage=storage,
        starting_version=cdc.starting_version,
        starting_latest=cdc.starting_named == "latest",
        starting_earliest=cdc.starting_named == "earliest",
        ending_version=cdc.ending_version,
        starting_timestamp_ms=cdc.starting_timestamp,
        ending_timestamp_ms=cdc.ending_timestamp,
        starting_inclusive=cdc.starting_bound_inclusive,
        ending_inclusive=cdc.ending_bound_inclusive,
        max_files=_positive(given, "maxFilesPerTrigger"),
        max_bytes=_size(given, "maxBytesPerTrigger"),
        fail_on_data_loss=cdc_options.boolean(given, "failOnDataLoss", True),
        parallelism=_positive(given, "parallelism"),
        resolve_task_bytes=_size(given, "resolveTaskBytes"),
        nullable_schema=cdc_options.boolean(given, NULLABLE_SCHEMA, False),
        **_row_level(given, cdc),
    )


def _timestamp_ms(name: str, value: object) -> int:
    return parse_timestamp_ms(name, str(value))


def _row_level(given: Mapping[str, str], cdc: CdcRequest[int]) -> dict[str, Any]:
    """The passes asked for, checked in Spark's order: the mode, then whether update
    detection has the carry-over removal it needs, then the row id."""
    row_id = cdc_options.row_id(given[ROW_ID]) if ROW_ID in given else None
    if cdc.deduplication_mode is None and cdc.compute_updates is None:
        return {"row_id": row_id}  # the raw feed
    mode = cdc.deduplication_mode or "dropCarryovers"
    if mode == "netChanges":
        raise error("INVALID_CDC_OPTION.NET_CHANGES_IN_SOURCE", source=SOURCE)
    updates = bool(cdc.compute_updates)
    if updates and mode == "none":
        raise error("INVALID_CDC_OPTION.UPDATE_DETECTION_REQUIRES_CARRY_OVER_REMOVAL")
    if updates and row_id is None:
        raise error("INVALID_CHANGELOG_SCHEMA.MISSING_ROW_ID", flags="computeUpdates")
    return {"row_id": row_id, "drop_carryovers": mode != "none", "compute_updates": updates}


def _positive(given: Mapping[str, str], name: str) -> int | None:
    if name not in given:
        return None
    text = given[name].strip()
    if not text.isdigit() or int(text) < 1:
        raise error("INVALID_CDC_OPTION.INVALID_NUMBER", option=name, value=given[name])
    return int(text)


def _size(given: Mapping[str, str], name: str) -> int | None:
    if name not in given:
        return None
    match = _SIZE.match(given[name])
    if not match or int(match.group(1)) < 1:
        raise error("INVALID_CDC_OPTION.INVALID_SIZE", option=name, value=given[name])
    return int(match.group(1)) * 1024 ** " kmgt".index(match.group(2).lower() or " ")
