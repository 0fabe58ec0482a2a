"""``ChangelogReader``: a Delta table's post-processed change feed, as ``spark.read.changes``
would give it on a server with native CDC.

It reads through the server's ``delta_changelog`` source and plans ``post_process`` with
what that source declares: carry-over rows, updates as delete+insert, intermediate
changes, no row version (carry-overs are found by comparing whole rows). Building the
DataFrame makes no server round trip.
"""

from __future__ import annotations

import difflib
from datetime import datetime, timedelta, timezone
from typing import Any

from pyspark.sql.connect.dataframe import DataFrame
from pyspark.sql.connect.session import SparkSession

from client.errors import CdcAnalysisException, invalid_option
from rewrite.options import KNOWN_OPTIONS, OptionValue
from rewrite.post_process import post_process
from rewrite.spec import ChangelogSpec
from server_plugin.source_options import OPTION_NAMES, STORAGE_PREFIX

SOURCE_NAME = "delta_changelog"
DELTA_SPEC = dict(
    row_version=None,
    contains_carryover_rows=True,
    represents_update_as_delete_and_insert=True,
    contains_intermediate_changes=True,
)
_CDC_OPTIONS = {name.lower(): name for name in KNOWN_OPTIONS}
_ROW_ID = "rowId"
# The source's own options (its range options are the CDC ones above; the path is the table).
_SOURCE_OPTIONS = {
    name.lower(): name for name in OPTION_NAMES if name.lower() not in {*_CDC_OPTIONS, "path"}
}
_ALL_OPTIONS = {_ROW_ID.lower(): _ROW_ID, **_CDC_OPTIONS, **_SOURCE_OPTIONS}
_RANGE_OPTIONS = (
    "startingVersion",
    "endingVersion",
    "startingBoundInclusive",
    "endingBoundInclusive",
)
# A zone-less timestamp means the session's time zone, which only the server knows; the
# source gets a bound this much wider, and post_process filters rows exactly.
_ANY_ZONE = timedelta(hours=18)


class ChangelogReader:
    """``ChangelogReader(spark).option("rowId", "id").changes("/data/orders")``.

    Options have Spark's CDC names and defaults (``deduplicationMode`` dropCarryovers,
    ``computeUpdates`` false, the range options); ``rowId`` names the row id columns
    (comma-separated); everything else goes to the source (``maxFilesPerTrigger``,
    ``maxBytesPerTrigger``, ``failOnDataLoss``, ``storage.<KEY>``).
    """

    def __init__(self, spark: SparkSession, streaming: bool = False) -> None:
        self._spark = spark
        self._streaming = streaming
        self._options: dict[str, OptionValue] = {}

    def option(self, key: str, value: OptionValue) -> ChangelogReader:
        self._options[key] = value
        return self

    def options(self, **options: OptionValue) -> ChangelogReader:
        self._options.update(options)
        return self

    def changes(self, table: str) -> DataFrame:
        """The change feed of the Delta table at ``table`` (a path or URI the server reads)."""
        row_id: list[str] | None = None
        cdc: dict[str, OptionValue] = {}
        source: dict[str, str] = {}
        for key, value in self._options.items():
            if key.lower() == _ROW_ID.lower():
                row_id = _row_id(value)
            elif key.lower() in _CDC_OPTIONS:
                cdc[_CDC_OPTIONS[key.lower()]] = value
            elif key.lower() in _SOURCE_OPTIONS or key.lower().startswith(STORAGE_PREFIX):
                source[key] = _text(value)
            else:
                raise _unknown_option(key)
        if self._streaming and str(cdc.get("startingVersion", "")).strip().lower() == "latest":
            source["startingVersion"] = "latest"
            del cdc["startingVersion"]
        source.update(self._range_for_source(cdc))
        reader: Any = self._spark.readStream if self._streaming else self._spark.read
        df = reader.format(SOURCE_NAME).options(**source).load(table)
        return post_process(df, ChangelogSpec(row_id=row_id, **DELTA_SPEC), cdc)

    def _range_for_source(self, cdc: dict[str, OptionValue]) -> dict[str, str]:
        """What lets the source skip commits outside the range; post_process still filters
        the rows exactly, so a hint may be wider than the range, never narrower."""
        hints = {name: _text(cdc[name]) for name in _RANGE_OPTIONS if name in cdc}
        for name, widen in (("startingTimestamp", -_ANY_ZONE), ("endingTimestamp", _ANY_ZONE)):
            if name in cdc:
                hint = _timestamp_hint(str(cdc[name]), widen)
                if hint is not None:
                    hints[name] = hint
                elif self._streaming and name == "startingTimestamp":
                    raise invalid_option(
                        "INVALID_TIMESTAMP",
                        f"A stream needs a startingTimestamp with a date and time, e.g. "
                        f"'2024-05-01 12:00:00Z', got {cdc[name]!r}.",
                        option=name,
                        value=str(cdc[name]),
                    )
        return hints


def _unknown_option(key: str) -> CdcAnalysisException:
    """Refused here, not by the source on the server, so the message keeps the user's
    spelling and can suggest the option meant."""
    close = difflib.get_close_matches(key.lower(), _ALL_OPTIONS, n=1)
    hint = f"Did you mean '{_ALL_OPTIONS[close[0]]}'? " if close else ""
    return invalid_option(
        "UNKNOWN_OPTION",
        f"Unknown ChangelogReader option '{key}'. {hint}The options are "
        f"{', '.join(_ALL_OPTIONS.values())} and {STORAGE_PREFIX}<KEY> for delta-rs storage "
        "options.",
        option=key,
    )


def _row_id(value: OptionValue) -> list[str]:
    columns = [c.strip() for c in str(value).split(",")]
    if not all(columns):
        raise CdcAnalysisException(
            "INVALID_CHANGELOG_SCHEMA.MISSING_ROW_ID",
            f"Option 'rowId' must name one or more columns, comma-separated, got {value!r}.",
        )
    return columns


def _text(value: OptionValue) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _timestamp_hint(text: str, widen: timedelta) -> str | None:
    """The bound for the source: as given when it names its zone, else widened by the
    largest zone offset and in UTC; None when it is not a plain date-time."""
    value = text.strip()
    try:
        moment = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith("Z") else value)
    except ValueError:
        return None
    if moment.tzinfo is not None:
        return moment.isoformat()
    return (moment + widen).replace(tzinfo=timezone.utc).isoformat()
