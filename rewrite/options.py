"""CDC read options: Spark 4.2's names, defaults and error conditions.

Validation order follows Spark's ``ChangelogInfoUtils.fromOptions`` (booleans and mode,
then range kind, then missing bounds, then timestamp parsing), so a request with several
mistakes reports the same one first on both sides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from spark_cdc.rewrite.errors import invalid_option
from spark_cdc.rewrite.timestamps import is_spark_timestamp
from spark_cdc.server_plugin.vocabulary import RANGE_OPTIONS

OptionValue = str | bool | int


class DeduplicationMode(str, Enum):
    """Spark's ``deduplicationMode``: ``none`` keeps every change; ``dropCarryovers`` removes
    rows a commit rewrote unchanged; ``netChanges`` also collapses each row id's changes to
    their net effect. A member is its option value wherever an option is given
    (``.option("deduplicationMode", DeduplicationMode.NET_CHANGES)``): a ``str`` whose
    ``str()`` is Spark's name for the mode, not ``DeduplicationMode.NET_CHANGES``."""

    NONE = "none"
    DROP_CARRYOVERS = "dropCarryovers"
    NET_CHANGES = "netChanges"

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class CdcOptions:
    """The CDC options of a read, parsed and checked (``parse_options``): Spark's option
    names in snake case, with Spark's defaults."""

    deduplication_mode: DeduplicationMode = DeduplicationMode.DROP_CARRYOVERS
    compute_updates: bool = False
    starting_version: int | None = None
    ending_version: int | None = None
    starting_timestamp: str | None = None
    ending_timestamp: str | None = None
    starting_bound_inclusive: bool = True
    ending_bound_inclusive: bool = True


KNOWN_OPTIONS = (*RANGE_OPTIONS, "deduplicationMode", "computeUpdates")
_CANONICAL = {name.lower(): name for name in KNOWN_OPTIONS}


def parse_options(options: Mapping[str, OptionValue] | None) -> CdcOptions:
    """Spark's CDC options (any key case, str/bool/int values) as ``CdcOptions``, refused
    with Spark's ``INVALID_CDC_OPTION.*`` conditions in Spark's order."""
    given = _canonical_keys(options or {})

    def boolean(name: str, default: bool) -> bool:
        value = given.get(name, default)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise invalid_option(
            "INVALID_BOOLEAN",
            f"Option '{name}' must be true or false, got {value!r}.",
            option=name,
            value=str(value),
        )

    starting_inclusive = boolean("startingBoundInclusive", True)
    ending_inclusive = boolean("endingBoundInclusive", True)
    mode = _deduplication_mode(given.get("deduplicationMode", "dropCarryovers"))
    compute_updates = boolean("computeUpdates", False)

    has_versions = "startingVersion" in given or "endingVersion" in given
    has_timestamps = "startingTimestamp" in given or "endingTimestamp" in given
    if has_versions and has_timestamps:
        raise invalid_option(
            "CONFLICTING_RANGE_TYPES",
            "A CDC read is bounded by versions or by timestamps, not both: drop either "
            "startingVersion/endingVersion or startingTimestamp/endingTimestamp.",
        )
    if has_versions and "startingVersion" not in given:
        raise invalid_option(
            "MISSING_STARTING_VERSION",
            "endingVersion needs a startingVersion: add option('startingVersion', <version>).",
        )
    if has_timestamps and "startingTimestamp" not in given:
        raise invalid_option(
            "MISSING_STARTING_TIMESTAMP",
            "endingTimestamp needs a startingTimestamp: add "
            "option('startingTimestamp', '<yyyy-MM-dd HH:mm:ss>').",
        )
    starting_version = _version(given, "startingVersion")
    ending_version = _version(given, "endingVersion")
    if ending_version is not None and ending_version < starting_version:  # type: ignore[operator]
        raise invalid_option(
            "INVALID_RANGE",
            f"endingVersion {ending_version} is before startingVersion {starting_version}: "
            "swap them or widen the range.",
        )
    return CdcOptions(
        deduplication_mode=mode,
        compute_updates=compute_updates,
        starting_version=starting_version,
        ending_version=ending_version,
        starting_timestamp=_timestamp(given, "startingTimestamp"),
        ending_timestamp=_timestamp(given, "endingTimestamp"),
        starting_bound_inclusive=starting_inclusive,
        ending_bound_inclusive=ending_inclusive,
    )


def _canonical_keys(options: Mapping[str, OptionValue]) -> dict[str, OptionValue]:
    given: dict[str, OptionValue] = {}
    for key, value in options.items():
        name = _CANONICAL.get(str(key).lower())
        if name is None:
            raise invalid_option(
                "UNKNOWN_OPTION",
                f"Unknown CDC option '{key}'; the options are: {', '.join(KNOWN_OPTIONS)}.",
                option=str(key),
            )
        if value is None:
            continue
        given[name] = value
    return given


def _deduplication_mode(value: OptionValue) -> DeduplicationMode:
    text = str(value).strip().lower()
    for mode in DeduplicationMode:
        if mode.value.lower() == text:
            return mode
    raise invalid_option(
        "INVALID_DEDUPLICATION_MODE",
        f"deduplicationMode '{value}' is not one of none, dropCarryovers, netChanges "
        "(case-insensitive).",
        mode=str(value),
    )


def _version(given: Mapping[str, OptionValue], name: str) -> int | None:
    if name not in given:
        return None
    value = given[name]
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit():
        raise invalid_option(
            "INVALID_VERSION",
            f"Option '{name}' must be a commit version (a whole number >= 0), got {value!r}.",
            option=name,
            value=str(value),
        )
    return int(text)


def _timestamp(given: Mapping[str, OptionValue], name: str) -> str | None:
    if name not in given:
        return None
    value = given[name]
    if not isinstance(value, str) or not is_spark_timestamp(value):
        raise invalid_option(
            "INVALID_TIMESTAMP",
            f"Option '{name}' is not a timestamp Spark can read: {value!r}. Use "
            "'yyyy-MM-dd[ HH:mm:ss[.SSSSSS]][zone]', e.g. '2024-05-01 12:00:00Z'.",
            option=name,
            value=str(value),
        )
    return value.strip()
