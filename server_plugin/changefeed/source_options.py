"""A changelog source's options: Spark's CDC range names plus Delta's streaming ones, the
row-level passes the source resolves itself, and how widely it reads; each source adds its
own (``OptionSet``).

Options reach a Python data source as strings, case-insensitively; a misspelt one fails
instead of being ignored. ``storage.<KEY>`` options go to the source's storage layer
(delta-rs' storage options, pyiceberg's FileIO properties: object-store credentials and the
like); a source may open more such families (Iceberg's ``catalog.<KEY>``).

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
from spark_cdc.server_plugin.changefeed.commit_timestamps import parse_timestamp_ms
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.vocabulary import RANGE_OPTIONS

DEFAULT_MAX_FILES = 1000
STORAGE_PREFIX = "storage."
# What ChangelogReader passes when the source resolves the row-level passes (postProcessing
# "source"), besides the internal NULLABLE_SCHEMA (``spark_cdc.server_plugin.cdc_options``).
RESOLUTION_OPTIONS = (ROW_ID, "deduplicationMode", "computeUpdates")
# Every source's options; a source adds its own (``OptionSet.own``).
COMMON_OPTION_NAMES = (
    "path",
    *RANGE_OPTIONS,
    "maxFilesPerTrigger",
    "maxBytesPerTrigger",
    "failOnDataLoss",
    "parallelism",
    "resolveTaskBytes",
    *RESOLUTION_OPTIONS,
)


@dataclass(frozen=True)
class OptionSet:
    """What one source accepts beyond the common options: its name (for messages), its
    own option names, and its option families by prefix with what they are for."""

    source: str
    own: tuple[str, ...] = ()
    prefixes: tuple[tuple[str, str], ...] = ((STORAGE_PREFIX, "storage options"),)
    # Whether the source finds a row id itself when ``rowId`` is not given (Iceberg: the
    # table's identifier fields), so update detection may be asked for without one.
    finds_row_id: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return (*COMMON_OPTION_NAMES, *self.own)

    @property
    def source_only(self) -> tuple[str, ...]:
        """What a user passes a ChangelogReader beyond Spark's CDC options and the table."""
        spark = ("path", *RANGE_OPTIONS, *RESOLUTION_OPTIONS)
        return tuple(n for n in self.names if n not in spark)

    @property
    def prefix_names(self) -> tuple[str, ...]:
        return tuple(prefix for prefix, _ in self.prefixes)


_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class SourceOptions:
    path: str
    storage: dict[str, str] = field(default_factory=dict)
    # The source's other families by prefix (without it), and its own options as given.
    families: dict[str, dict[str, str]] = field(default_factory=dict)
    own: dict[str, str] = field(default_factory=dict)
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


def parse_source_options(
    raw: Mapping[str, str], accepted: OptionSet, streaming: bool = False
) -> SourceOptions:
    """The options, checked by the validator the client shares
    (``spark_cdc.server_plugin.cdc_options``: Spark's order, a stream's end bound first),
    then the source's common ones; the source reads its ``own`` and ``families`` itself."""
    given: dict[str, str] = {}
    found: dict[str, dict[str, str]] = {prefix: {} for prefix, _ in accepted.prefixes}
    for key, value in raw.items():
        prefix = next((p for p in found if key.lower().startswith(p)), None)
        if prefix is not None:
            found[prefix][key[len(prefix) :]] = value
        else:
            given[key] = str(value)
    families = ", ".join(f"{p}<KEY> for {what}" for p, what in accepted.prefixes)
    families = f" and {families}" if families else ""
    source = accepted.source
    given = cdc_options.canonical(given, (*accepted.names, NULLABLE_SCHEMA), source, families)
    if not given.get("path"):
        raise error("INVALID_CDC_OPTION.MISSING_PATH", source=source)
    cdc = cdc_options.check_cdc_options(
        given, _timestamp_ms, streaming, named_versions=("latest", "earliest")
    )
    return SourceOptions(
        path=given["path"],
        storage=found.pop(STORAGE_PREFIX, {}),
        families=found,
        own={k: v for k, v in given.items() if k in accepted.own},
        starting_version=cdc.starting_version,
        starting_latest=cdc.starting_named == "latest",
        starting_earliest=cdc.starting_named == "earliest",
        ending_version=cdc.ending_version,
        starting_timestamp_ms=cdc.starting_timestamp,
        ending_timestamp_ms=cdc.ending_timestamp,
        starting_inclusive=cdc.starting_bound_inclusive,
        ending_inclusive=cdc.ending_bound_inclusive,
        max_files=positive(given, "maxFilesPerTrigger"),
        max_bytes=_size(given, "maxBytesPerTrigger"),
        fail_on_data_loss=cdc_options.boolean(given, "failOnDataLoss", True),
        parallelism=positive(given, "parallelism"),
        resolve_task_bytes=_size(given, "resolveTaskBytes"),
        nullable_schema=cdc_options.boolean(given, NULLABLE_SCHEMA, False),
        **_row_level(given, cdc, accepted),
    )


def _timestamp_ms(name: str, value: object) -> int:
    return parse_timestamp_ms(name, str(value))


def _row_level(
    given: Mapping[str, str], cdc: CdcRequest[int], accepted: OptionSet
) -> dict[str, Any]:
    """The passes asked for, checked in Spark's order: the mode, then whether update
    detection has the carry-over removal it needs, then the row id (unless the source
    finds one itself, and refuses the read when the table has none)."""
    row_id = cdc_options.row_id(given[ROW_ID]) if ROW_ID in given else None
    if cdc.deduplication_mode is None and cdc.compute_updates is None:
        return {"row_id": row_id}  # the raw feed
    mode = cdc.deduplication_mode or "dropCarryovers"
    if mode == "netChanges":
        raise error("INVALID_CDC_OPTION.NET_CHANGES_IN_SOURCE", source=accepted.source)
    updates = bool(cdc.compute_updates)
    if updates and mode == "none":
        raise error("INVALID_CDC_OPTION.UPDATE_DETECTION_REQUIRES_CARRY_OVER_REMOVAL")
    if updates and row_id is None and not accepted.finds_row_id:
        raise error("INVALID_CHANGELOG_SCHEMA.MISSING_ROW_ID", flags="computeUpdates")
    return {"row_id": row_id, "drop_carryovers": mode != "none", "compute_updates": updates}


def positive(given: Mapping[str, str], name: str) -> int | None:
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
