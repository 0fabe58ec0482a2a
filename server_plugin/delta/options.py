"""``delta_changelog`` options: Spark's CDC range names plus Delta's streaming ones.

Options reach a Python data source as strings, case-insensitively; a misspelt one fails
instead of being ignored. ``storage.<KEY>`` options go to delta-rs as storage options
(object-store credentials and the like).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_cdc.server_plugin.delta.timeline import parse_timestamp_ms
from spark_cdc.server_plugin.errors import option_error, source_error
from spark_cdc.server_plugin.vocabulary import RANGE_OPTIONS

DEFAULT_MAX_FILES = 1000
STORAGE_PREFIX = "storage."
OPTION_NAMES = (
    "path",
    *RANGE_OPTIONS,
    "maxFilesPerTrigger",
    "maxBytesPerTrigger",
    "failOnDataLoss",
)
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


def parse_source_options(raw: Mapping[str, str]) -> SourceOptions:
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
        max_bytes=_size(given.get("maxBytesPerTrigger")),
        fail_on_data_loss=_boolean(given, "failOnDataLoss", True),
    )
    start, end = options.starting_version, options.ending_version
    if start is not None and end is not None and end < start:
        raise option_error(
            "INVALID_RANGE", f"endingVersion {end} is before startingVersion {start}."
        )
    return options


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


def _size(text: str | None) -> int | None:
    if text is None:
        return None
    match = _SIZE.match(text)
    if not match or int(match.group(1)) < 1:
        raise source_error(
            "INVALID_OPTION",
            f"Option 'maxBytesPerTrigger' must be a size such as 1048576, '512k', '64m' or "
            f"'1g', got '{text}'.",
            option="maxBytesPerTrigger",
            value=text,
        )
    return int(match.group(1)) * 1024 ** " kmgt".index(match.group(2).lower() or " ")
