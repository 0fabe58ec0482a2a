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

from spark_cdc.server_plugin.delta.timeline import parse_timestamp_ms
from spark_cdc.server_plugin.errors import ChangelogSourceError, option_error, source_error
from spark_cdc.server_plugin.vocabulary import INVALID_CHANGELOG_SCHEMA, RANGE_OPTIONS

DEFAULT_MAX_FILES = 1000
STORAGE_PREFIX = "storage."
# What ChangelogReader passes when the source resolves the row-level passes (postProcessing
# "source"); ``nullableSchema`` makes the source declare every column nullable, as the
# client's streaming plan does, so both paths give one schema.
RESOLUTION_OPTIONS = ("rowId", "deduplicationMode", "computeUpdates", "nullableSchema")
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
_MODES = {"none": "none", "dropcarryovers": "dropCarryovers", "netchanges": "netChanges"}
_CANONICAL = {name.lower(): name for name in OPTION_NAMES}
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
    """The options, checked in Spark's order, except that a stream's end bound is refused
    before the range is: a stream given only endingVersion would otherwise be told to add
    startingVersion, and then be refused for the end bound."""
    given: dict[str, str] = {}
    storage: dict[str, str] = {}
    for key, value in raw.items():
        if key.lower().startswith(STORAGE_PREFIX):
            storage[key[len(STORAGE_PREFIX) :]] = value
            continue
        name = _CANONICAL.get(key.lower())
        if name is None:
            raise source_error(
                "UNKNOWN_OPTION",
                f"Unknown delta_changelog option '{key}'; the options are "
                f"{', '.join(OPTION_NAMES)} and {STORAGE_PREFIX}<KEY> for delta-rs storage "
                "options.",
                option=key,
            )
        given[name] = str(value)
    if not given.get("path"):
        raise source_error(
            "MISSING_PATH",
            "delta_changelog needs the table's location: .load('/path/to/table') or "
            "option('path', ...).",
        )
    if streaming and {"endingVersion", "endingTimestamp"} & given.keys():
        raise option_error(
            "ENDING_BOUND_IN_STREAM",
            "A stream has no end: drop endingVersion/endingTimestamp, and use "
            "trigger(availableNow=True) to stop after what the table holds now.",
        )
    versions = {"startingVersion", "endingVersion"} & given.keys()
    stamps = {"startingTimestamp", "endingTimestamp"} & given.keys()
    if versions and stamps:
        raise option_error(
            "CONFLICTING_RANGE_TYPES",
            "A CDC read is bounded by versions or by timestamps, not both.",
        )
    if "endingVersion" in given and "startingVersion" not in given:
        raise option_error("MISSING_STARTING_VERSION", "endingVersion needs a startingVersion.")
    if "endingTimestamp" in given and "startingTimestamp" not in given:
        raise option_error(
            "MISSING_STARTING_TIMESTAMP", "endingTimestamp needs a startingTimestamp."
        )
    named = given.get("startingVersion", "").strip().lower()
    latest, earliest = named == "latest", named == "earliest"
    options = SourceOptions(
        path=given["path"],
        storage=storage,
        starting_version=None if latest or earliest else _version(given, "startingVersion"),
        starting_latest=latest,
        starting_earliest=earliest,
        ending_version=_version(given, "endingVersion"),
        starting_timestamp_ms=_timestamp(given, "startingTimestamp"),
        ending_timestamp_ms=_timestamp(given, "endingTimestamp"),
        starting_inclusive=_boolean(given, "startingBoundInclusive", True),
        ending_inclusive=_boolean(given, "endingBoundInclusive", True),
        max_files=_positive(given, "maxFilesPerTrigger"),
        max_bytes=_size(given.get("maxBytesPerTrigger"), "maxBytesPerTrigger"),
        fail_on_data_loss=_boolean(given, "failOnDataLoss", True),
        parallelism=_positive(given, "parallelism"),
        resolve_task_bytes=_size(given.get("resolveTaskBytes"), "resolveTaskBytes"),
        nullable_schema=_boolean(given, "nullableSchema", False),
        **_row_level(given),
    )
    start, end = options.starting_version, options.ending_version
    if start is not None and end is not None and end < start:
        raise option_error(
            "INVALID_RANGE", f"endingVersion {end} is before startingVersion {start}."
        )
    return options


def _row_level(given: Mapping[str, str]) -> dict[str, object]:
    """The passes asked for, checked in Spark's order: the mode, then whether update
    detection has the carry-over removal it needs, then the row id."""
    row_id = None
    if "rowId" in given:
        row_id = tuple(c.strip() for c in given["rowId"].split(","))
        if not all(row_id):
            raise _missing_row_id(
                f"Option 'rowId' must name one or more columns, comma-separated, got "
                f"'{given['rowId']}'."
            )
    if "deduplicationMode" not in given and "computeUpdates" not in given:
        return {"row_id": row_id}  # the raw feed
    text = given.get("deduplicationMode", "dropCarryovers")
    mode = _MODES.get(text.strip().lower())
    if mode is None:
        raise option_error(
            "INVALID_DEDUPLICATION_MODE",
            f"deduplicationMode must be none, dropCarryovers or netChanges, got '{text}'.",
            mode=text,
        )
    if mode == "netChanges":
        raise source_error(
            "INVALID_OPTION",
            "delta_changelog resolves carry-overs and updates commit by commit; net changes "
            "span commits: read with ChangelogReader and deduplicationMode=netChanges, or "
            "give the source deduplicationMode=dropCarryovers.",
            option="deduplicationMode",
            value=text,
        )
    updates = _boolean(given, "computeUpdates", False)
    if updates and mode == "none":
        raise option_error(
            "UPDATE_DETECTION_REQUIRES_CARRY_OVER_REMOVAL",
            "computeUpdates=true on a changelog with carry-over rows needs carry-over "
            "removal, or unchanged rows would be reported as updates: set deduplicationMode "
            "to dropCarryovers (the default).",
        )
    if updates and row_id is None:
        raise _missing_row_id(
            "Update detection (computeUpdates) needs a row id, the column(s) that identify a "
            "row across its versions: give one with option('rowId', 'id'), or use "
            "dropCarryovers without computeUpdates."
        )
    return {"row_id": row_id, "drop_carryovers": mode != "none", "compute_updates": updates}


def _missing_row_id(message: str) -> ChangelogSourceError:
    return ChangelogSourceError(f"{INVALID_CHANGELOG_SCHEMA}.MISSING_ROW_ID", message)


def _version(given: Mapping[str, str], name: str) -> int | None:
    if name not in given:
        return None
    text = given[name].strip()
    if not text.isdigit():
        latest = ", 'earliest' or 'latest'" if name == "startingVersion" else ""
        raise option_error(
            "INVALID_VERSION",
            f"Option '{name}' must be a commit version (a whole number >= 0){latest}, "
            f"got '{given[name]}'.",
            option=name,
            value=given[name],
        )
    return int(text)


def _timestamp(given: Mapping[str, str], name: str) -> int | None:
    return parse_timestamp_ms(name, given[name]) if name in given else None


def _boolean(given: Mapping[str, str], name: str, default: bool) -> bool:
    text = given.get(name, str(default)).strip().lower()
    if text not in ("true", "false"):
        raise option_error(
            "INVALID_BOOLEAN",
            f"Option '{name}' must be true or false, got '{text}'.",
            option=name,
            value=text,
        )
    return text == "true"


def _positive(given: Mapping[str, str], name: str) -> int | None:
    if name not in given:
        return None
    text = given[name].strip()
    if not text.isdigit() or int(text) < 1:
        raise source_error(
            "INVALID_OPTION",
            f"Option '{name}' must be a whole number >= 1, got '{text}'.",
            option=name,
            value=text,
        )
    return int(text)


def _size(text: str | None, name: str) -> int | None:
    if text is None:
        return None
    match = _SIZE.match(text)
    if not match or int(match.group(1)) < 1:
        raise source_error(
            "INVALID_OPTION",
            f"Option '{name}' must be a size such as 1048576, '512k', '64m' or '1g', got '{text}'.",
            option=name,
            value=text,
        )
    return int(match.group(1)) * 1024 ** " kmgt".index(match.group(2).lower() or " ")
