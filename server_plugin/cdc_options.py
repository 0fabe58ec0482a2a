"""Spark's CDC options, checked once for the client and every source, and documented once.

The client (``spark_cdc.rewrite.options``, ``ChangelogReader``) and each source
(``spark_cdc.server_plugin.changefeed.source_options``) give the options they received to
``check_cdc_options`` and get the same answer, or the same refusal: the same condition,
parameters and sentence (``spark_cdc.server_plugin.conditions``). The checks run in Spark's
order (``ChangelogInfoUtils.fromOptions``: the booleans and the mode, then the range's kind,
then missing bounds, then the values), except that a stream's end bound is refused first: a
stream given only endingVersion would otherwise be told to add startingVersion, and then be
refused for the end bound. Only timestamps differ by side, so the caller says how to read
them: the server turns them into epoch milliseconds, the client keeps Spark's string for its
own cast.

Pure Python (the registry and the wire form, no PySpark): it ships to servers with the
plugin. ``OPTIONS`` documents every option a user can give; the source's internal handshake
(``NULLABLE_SCHEMA``) is not one of them.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from spark_cdc.server_plugin.errors import ChangelogSourceError, error
from spark_cdc.server_plugin.vocabulary import RANGE_OPTIONS

T = TypeVar("T")

DEDUPLICATION_MODES = ("none", "dropCarryovers", "netChanges")
CDC_OPTION_NAMES = (*RANGE_OPTIONS, "deduplicationMode", "computeUpdates")
ROW_ID = "rowId"
# What ChangelogReader passes a source that resolves the row-level passes for a stream: the
# source then declares every column nullable, as the client's streaming plan does, so both
# paths give one schema. Not an option for users: no list of options names it.
NULLABLE_SCHEMA = "__spark_cdc_nullable_schema"


class OptionDoc(NamedTuple):
    name: str  # Spark's spelling
    default: str  # as a user writes it; "" for none
    values: str  # what it accepts, short
    description: str  # one sentence
    # "cdc" (Spark's CDC options), "reader" (ChangelogReader), "source" (both sources'),
    # "iceberg" (the Iceberg source's own)
    scope: str


OPTIONS: tuple[OptionDoc, ...] = (
    OptionDoc(
        "startingVersion",
        "",
        "a version >= 0; 'earliest'; 'latest' (streams)",
        "The first commit version read (inclusive by default); a stream without one starts "
        "with a snapshot of the table.",
        "cdc",
    ),
    OptionDoc(
        "endingVersion",
        "",
        "a version >= startingVersion",
        "The last commit version a batch read covers (inclusive by default); streams refuse it.",
        "cdc",
    ),
    OptionDoc(
        "startingTimestamp",
        "",
        "'yyyy-MM-dd[ HH:mm:ss[.SSSSSS]][zone]'",
        "Read from the first commit made at or after this time, instead of a version.",
        "cdc",
    ),
    OptionDoc(
        "endingTimestamp",
        "",
        "'yyyy-MM-dd[ HH:mm:ss[.SSSSSS]][zone]'",
        "Read up to the last commit made at or before this time (batch reads only).",
        "cdc",
    ),
    OptionDoc(
        "startingBoundInclusive",
        "true",
        "true, false",
        "Whether the starting version or timestamp itself is read.",
        "cdc",
    ),
    OptionDoc(
        "endingBoundInclusive",
        "true",
        "true, false",
        "Whether the ending version or timestamp itself is read.",
        "cdc",
    ),
    OptionDoc(
        "deduplicationMode",
        "dropCarryovers",
        "none, dropCarryovers, netChanges (any case)",
        "none keeps every change; dropCarryovers removes rows a commit rewrote unchanged; "
        "netChanges also collapses each row id's changes to their net effect.",
        "cdc",
    ),
    OptionDoc(
        "computeUpdates",
        "false",
        "true, false",
        "Turn a delete and an insert of one row id in one commit into update_preimage and "
        "update_postimage (needs rowId).",
        "cdc",
    ),
    OptionDoc(
        ROW_ID,
        "",
        "column names, comma-separated (a.b for a nested field)",
        "The column(s) that identify a row across its versions; without it rows are "
        "identified by their whole content.",
        "reader",
    ),
    OptionDoc(
        "postProcessing",
        "source",
        "source, client",
        "Where carry-over removal and update detection run: in the source, or in the plan "
        "the client builds.",
        "reader",
    ),
    OptionDoc(
        "path",
        "",
        "a path or URI",
        "The table: a Delta table's root directory (holding _delta_log); an Iceberg table's "
        "folder (holding metadata/) or one of its *.metadata.json files. .load(path) sets it.",
        "source",
    ),
    OptionDoc(
        "maxFilesPerTrigger",
        "1000",
        "a whole number >= 1",
        "At most this many data files per micro-batch (whole commits, at least one).",
        "source",
    ),
    OptionDoc(
        "maxBytesPerTrigger",
        "",
        "a size: 1048576, '512k', '64m', '1g'",
        "At most about this many bytes of data files per micro-batch (whole commits, at "
        "least one).",
        "source",
    ),
    OptionDoc(
        "failOnDataLoss",
        "true",
        "true, false",
        "Whether a commit or data file that is gone fails the read, or is skipped with a warning.",
        "source",
    ),
    OptionDoc(
        "parallelism",
        "",
        "a whole number >= 1",
        "How many tasks read the files; by default the driver's cores.",
        "source",
    ),
    OptionDoc(
        "resolveTaskBytes",
        "",
        "a size: 1048576, '512k', '64m', '1g'",
        "How many bytes of files one task resolves carry-overs and updates for.",
        "source",
    ),
    OptionDoc(
        "storage.<KEY>",
        "",
        "text",
        "A storage option: delta-rs' for Delta (storage.AWS_REGION), pyiceberg's table and "
        "FileIO properties for Iceberg (storage.s3.region, storage.py-io-impl).",
        "source",
    ),
    OptionDoc(
        "branch",
        "main",
        "a branch or tag of the table",
        "Which of the Iceberg table's branches is read: its snapshots, oldest first, are the "
        "commits.",
        "iceberg",
    ),
    OptionDoc(
        "startingSnapshotId",
        "",
        "a snapshot id of the branch",
        "Read from this snapshot on (inclusive by default, as startingVersion; Iceberg's own "
        "start-snapshot-id is exclusive), in place of startingVersion.",
        "iceberg",
    ),
    OptionDoc(
        "endingSnapshotId",
        "",
        "a snapshot id of the branch",
        "Read up to this snapshot (inclusive by default), in place of endingVersion; batch "
        "reads only.",
        "iceberg",
    ),
    OptionDoc(
        "catalog.<KEY>",
        "",
        "text",
        "A pyiceberg catalog property (catalog.type, catalog.uri, catalog.warehouse, "
        "catalog.name...): the path is then a table name in that catalog.",
        "iceberg",
    ),
    OptionDoc(
        "storage.location-map",
        "",
        "a JSON object: recorded prefix to where those files are now",
        "With storage.py-io-impl=spark_cdc.server_plugin.iceberg.relocated_io.RelocatedFileIO, "
        "reads an Iceberg table from a place other than the one its metadata records.",
        "iceberg",
    ),
)


def option_names(scope: str) -> tuple[str, ...]:
    return tuple(o.name for o in OPTIONS if o.scope == scope and "<" not in o.name)


def option(options: Mapping[str, Any], name: str) -> str | None:
    """The value of option ``name`` in ``options``, found as Spark finds it: case-insensitively
    (the options a Python data source receives are already keyed so, a plain dict may not be)."""
    wanted = name.lower()
    return next((str(v) for k, v in options.items() if str(k).lower() == wanted), None)


def canonical(
    options: Mapping[str, T], known: Iterable[str], reader: str, families: str = ""
) -> dict[str, T]:
    """``options`` under the known names' spelling (keys are case-insensitive, as Spark's);
    an unknown one is refused in the user's spelling with the closest known name.
    ``families``: the option families the list ends with (" and storage.<KEY>")."""
    names = {name.lower(): name for name in known}
    given: dict[str, T] = {}
    for key, value in options.items():
        name = names.get(str(key).lower())
        if name is None:
            raise unknown_option(str(key), names.values(), reader, families)
        given[name] = value
    return given


def unknown_option(
    key: str, known: Iterable[str], reader: str, families: str = ""
) -> ChangelogSourceError:
    """``INVALID_CDC_OPTION.UNKNOWN_OPTION``, proposing the closest of ``known``."""
    shown = [n for n in known if n != NULLABLE_SCHEMA]
    by_lower = {n.lower(): n for n in shown}
    close = difflib.get_close_matches(key.lower(), by_lower, n=1, cutoff=0)
    return error(
        "INVALID_CDC_OPTION.UNKNOWN_OPTION",
        reader=reader,
        option=key,
        proposal=by_lower[close[0]] if close else shown[0],
        options=", ".join(shown) + families,
    )


@dataclass(frozen=True)
class CdcRequest(Generic[T]):
    """Spark's CDC options, checked; timestamps as the caller's reader made them."""

    deduplication_mode: str | None  # one of DEDUPLICATION_MODES; None: not given
    compute_updates: bool | None  # None: not given
    starting_version: int | None
    starting_named: str | None  # "earliest" or "latest" (where the caller allows them)
    ending_version: int | None
    starting_timestamp: T | None
    ending_timestamp: T | None
    starting_bound_inclusive: bool
    ending_bound_inclusive: bool


def check_cdc_options(
    given: Mapping[str, object],
    timestamp: Callable[[str, object], T],
    streaming: bool = False,
    named_versions: tuple[str, ...] = (),
) -> CdcRequest[T]:
    """Spark's CDC options among ``given`` (canonical names; others are ignored), checked
    in Spark's order. ``timestamp(name, value)`` reads a timestamp or raises
    ``INVALID_CDC_OPTION.INVALID_TIMESTAMP`` (``invalid_timestamp``); ``named_versions``
    are the names startingVersion may take ('earliest', 'latest')."""
    if streaming and {"endingVersion", "endingTimestamp"} & given.keys():
        raise error("INVALID_CDC_OPTION.ENDING_BOUND_IN_STREAM")
    starting_inclusive = boolean(given, "startingBoundInclusive", True)
    ending_inclusive = boolean(given, "endingBoundInclusive", True)
    mode = None
    if given.get("deduplicationMode") is not None:
        mode = deduplication_mode(given["deduplicationMode"])
    updates = boolean(given, "computeUpdates", False) if "computeUpdates" in given else None
    versions = {"startingVersion", "endingVersion"} & given.keys()
    stamps = {"startingTimestamp", "endingTimestamp"} & given.keys()
    if versions and stamps:
        raise error("INVALID_CDC_OPTION.CONFLICTING_RANGE_TYPES")
    if versions and "startingVersion" not in given:
        raise error("INVALID_CDC_OPTION.MISSING_STARTING_VERSION")
    if stamps and "startingTimestamp" not in given:
        raise error("INVALID_CDC_OPTION.MISSING_STARTING_TIMESTAMP")
    named = str(given.get("startingVersion", "")).strip().lower()
    named = named if named in named_versions else ""
    start = None if named else version(given, "startingVersion")
    end = version(given, "endingVersion")
    if start is not None and end is not None and end < start:
        raise error("INVALID_CDC_OPTION.INVALID_RANGE", endingVersion=end, startingVersion=start)
    return CdcRequest(
        deduplication_mode=mode,
        compute_updates=updates,
        starting_version=start,
        starting_named=named or None,
        ending_version=end,
        starting_timestamp=_read(given, "startingTimestamp", timestamp),
        ending_timestamp=_read(given, "endingTimestamp", timestamp),
        starting_bound_inclusive=starting_inclusive,
        ending_bound_inclusive=ending_inclusive,
    )


def _read(
    given: Mapping[str, object], name: str, timestamp: Callable[[str, object], T]
) -> T | None:
    return timestamp(name, given[name]) if name in given else None


def invalid_timestamp(name: str, value: object) -> ChangelogSourceError:
    return error("INVALID_CDC_OPTION.INVALID_TIMESTAMP", option=name, value=value)


def boolean(given: Mapping[str, object], name: str, default: bool) -> bool:
    value = given.get(name, default)
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise error("INVALID_CDC_OPTION.INVALID_BOOLEAN", option=name, value=value)
    return text == "true"


def deduplication_mode(value: object) -> str:
    text = str(value).strip().lower()
    for mode in DEDUPLICATION_MODES:
        if mode.lower() == text:
            return mode
    raise error("INVALID_CDC_OPTION.INVALID_DEDUPLICATION_MODE", mode=value)


def version(given: Mapping[str, object], name: str) -> int | None:
    if name not in given:
        return None
    value = given[name]
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit():
        raise error("INVALID_CDC_OPTION.INVALID_VERSION", option=name, value=value)
    return int(text)


def row_id(value: object) -> tuple[str, ...]:
    """``rowId``: one or more column names, comma-separated."""
    columns = tuple(c.strip() for c in str(value).split(","))
    if not all(columns):
        raise error("INVALID_CDC_OPTION.INVALID_ROW_ID", option=ROW_ID, value=value)
    return columns
