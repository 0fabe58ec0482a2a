"""``ChangelogReader``: a Delta table's post-processed change feed, as ``spark.read.changes``
would give it on a server with native CDC.

It reads through the server's ``delta_changelog`` source. By default
(``postProcessing=source``) the source itself resolves the row-level passes, carry-over
removal and update detection, commit by commit, and declares them done, so ``post_process``
plans nothing for them (no shuffle, aggregate, watermark or state) and only net changes keep
the client's stateful operator. With ``postProcessing=client`` the source serves the raw
feed and ``post_process`` plans every pass with what the source declares: carry-over rows,
updates as delete+insert, intermediate changes, no row version (carry-overs are found by
comparing whole rows). Both give the same rows, schema and errors. Building the DataFrame
makes no server round trip.
"""

from __future__ import annotations

import difflib
from datetime import datetime, timedelta, timezone
from typing import Any

from pyspark.sql.connect import functions as F
from pyspark.sql.connect.dataframe import DataFrame
from pyspark.sql.connect.session import SparkSession
from spark_cdc.rewrite.column_functions import settle_column_functions
from spark_cdc.rewrite.errors import invalid_option, missing_row_id
from spark_cdc.rewrite.options import KNOWN_OPTIONS, CdcOptions, OptionValue, parse_options
from spark_cdc.rewrite.post_process import planned_passes, post_process, refuse_reserved_columns
from spark_cdc.rewrite.spec import ChangelogSpec
from spark_cdc.server_plugin.vocabulary import RANGE_OPTIONS
from spark_cdc.sources import DELTA, ChangelogSource

_CDC_OPTIONS = {name.lower(): name for name in KNOWN_OPTIONS}
_ROW_ID = "rowId"
_POST_PROCESSING = "postProcessing"
_WHERE = ("source", "client")
# A zone-less timestamp means the session's time zone, which only the server knows; the
# source gets a bound this much wider, and post_process filters rows exactly.
_ANY_ZONE = timedelta(hours=18)


class ChangelogReader:
    """A Delta table's change feed, post-processed as Spark's ``changes()`` would give it.

    ``ChangelogReader(spark).option("rowId", "id").changes("/data/orders")`` is a batch
    DataFrame; ``ChangelogReader(spark, streaming=True)`` gives a streaming one. Building it
    makes no server round trip. Options (keys case-insensitive, values str, bool or int):

    - ``rowId``: the column(s) identifying a row, comma-separated; needed for
      ``computeUpdates`` and ``netChanges``. Without it rows are identified by their whole
      content, which is enough for the default carry-over removal.
    - Spark's CDC options, with Spark's defaults: ``deduplicationMode`` (``none``,
      ``dropCarryovers`` (default), ``netChanges``), ``computeUpdates`` (false),
      ``startingVersion`` (a version; ``earliest``; ``latest`` for streams),
      ``endingVersion``, ``startingTimestamp``, ``endingTimestamp`` (batch only for the
      ending bounds), ``startingBoundInclusive``, ``endingBoundInclusive`` (true).
    - ``postProcessing``: where carry-over removal and update detection run: ``source``
      (default: inside the source, per commit, with no shuffle, aggregate or state) or
      ``client`` (the client-built plan, as ``post_process`` plans it for any DataFrame).
      Same rows, schema and errors either way.
    - The source's own: ``maxFilesPerTrigger``, ``maxBytesPerTrigger``, ``failOnDataLoss``,
      ``parallelism`` (tasks the cluster runs at once; default the server driver's cores),
      ``resolveTaskBytes`` (data-file bytes one task resolves at a time; default ``64m``),
      and ``storage.<KEY>`` for delta-rs storage options (object-store credentials).

    Any other option is refused while the DataFrame is built
    (``INVALID_CDC_OPTION.UNKNOWN_OPTION``, suggesting the option meant).
    """

    def __init__(
        self, spark: SparkSession, streaming: bool = False, source: ChangelogSource = DELTA
    ) -> None:
        self._spark = spark
        self._streaming = streaming
        self._source = source
        own = {name.lower(): name for name in source.options}
        self._known = {
            _ROW_ID.lower(): _ROW_ID,
            _POST_PROCESSING.lower(): _POST_PROCESSING,
            **_CDC_OPTIONS,
            **own,
        }
        self._options: dict[str, OptionValue] = {}

    def option(self, key: str, value: OptionValue) -> ChangelogReader:
        """Set one option (see the class); returns the reader, for chaining."""
        self._options[key] = value
        return self

    def options(self, **options: OptionValue) -> ChangelogReader:
        """Set several options at once (see the class); returns the reader."""
        self._options.update(options)
        return self

    def changes(self, table: str) -> DataFrame:
        """The post-processed change feed of the table at ``table`` (a path or URI the server
        reads), batch or streaming as the reader was made."""
        settle_column_functions(self._spark)
        row_id, cdc, source, where = self._split_options()
        spec = self._source.spec(row_id)
        opts = self._check_range(cdc, source)
        passes, _ = planned_passes(spec, opts)
        if where == "client" or not (self._source.resolves_row_level and passes.any):
            return post_process(self._load(table, source), spec, cdc)
        source.update(self._source.resolution_options(row_id, passes, self._streaming))
        feed = _referencing(self._load(table, source), row_id)
        return post_process(feed, self._source.resolved_spec(row_id, passes), cdc)

    def source_feed(self, table: str) -> tuple[DataFrame, ChangelogSpec, dict[str, OptionValue]]:
        """The source's own (raw) change feed, the ``ChangelogSpec`` it declares and the CDC
        options, before ``post_process``: for callers that post-process each micro-batch
        themselves (``spark-cdc tail``). The options are checked as for ``changes``."""
        settle_column_functions(self._spark)
        row_id, cdc, source, _ = self._split_options()
        self._check_range(cdc, source)
        return self._load(table, source), self._source.spec(row_id), cdc

    def _split_options(
        self,
    ) -> tuple[list[str] | None, dict[str, OptionValue], dict[str, str], str]:
        """The row id, the CDC options, the source's options and where post-processing
        runs, with unknown options refused in the user's spelling."""
        row_id: list[str] | None = None
        where = "source"
        cdc: dict[str, OptionValue] = {}
        source: dict[str, str] = {}
        prefixes = tuple(p.lower() for p in self._source.option_prefixes)
        for key, value in self._options.items():
            name = self._known.get(key.lower())
            if name == _ROW_ID:
                row_id = _row_id(value)
            elif name == _POST_PROCESSING:
                where = _where(value)
            elif key.lower() in _CDC_OPTIONS:
                cdc[_CDC_OPTIONS[key.lower()]] = value
            elif name is not None or key.lower().startswith(prefixes):
                source[key] = _text(value)
            else:
                raise self._unknown_option(key)
        named = str(cdc.get("startingVersion", "")).strip().lower()
        if self._streaming and named == "latest":
            source["startingVersion"] = "latest"
            del cdc["startingVersion"]
        if named == "earliest":  # only the source knows which version that is
            source["startingVersion"] = "earliest"
            cdc["startingVersion"] = 0  # the rows' range filter: everything the source serves
        return row_id, cdc, source, where

    def _check_range(self, cdc: dict[str, OptionValue], source: dict[str, str]) -> CdcOptions:
        """The parsed CDC options (Spark's order: the options themselves are checked first),
        except that a stream's end bound is refused before anything else: a stream given only
        endingVersion was told to add startingVersion, then refused for the end bound. The
        range goes to the source as a hint."""
        if self._streaming and {"endingVersion", "endingTimestamp"} & cdc.keys():
            raise invalid_option(
                "ENDING_BOUND_IN_STREAM",
                "A stream has no end: drop endingVersion/endingTimestamp, and use "
                "trigger(availableNow=True) to stop after what the table holds now.",
            )
        opts = parse_options(cdc)
        if self._source.takes_range:
            hints = self._range_for_source(cdc)
            source.update({k: v for k, v in hints.items() if k not in source})
        return opts

    def _load(self, table: str, source: dict[str, str]) -> DataFrame:
        reader: Any = self._spark.readStream if self._streaming else self._spark.read
        return reader.format(self._source.name).options(**source).load(table)

    def _range_for_source(self, cdc: dict[str, OptionValue]) -> dict[str, str]:
        """What lets the source skip commits outside the range; post_process still filters
        the rows exactly, so a hint may be wider than the range, never narrower."""
        exact = [n for n in RANGE_OPTIONS if n not in ("startingTimestamp", "endingTimestamp")]
        hints = {name: _text(cdc[name]) for name in exact if name in cdc}
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

    def _unknown_option(self, key: str) -> Exception:
        """Refused here, not by the source on the server, so the message keeps the user's
        spelling and can suggest the option meant."""
        close = difflib.get_close_matches(key.lower(), self._known, n=1)
        hint = f"Did you mean '{self._known[close[0]]}'? " if close else ""
        families = "".join(f" and {p}<KEY>" for p in self._source.option_prefixes)
        return invalid_option(
            "UNKNOWN_OPTION",
            f"Unknown ChangelogReader option '{key}'. {hint}The options are "
            f"{', '.join(self._known.values())}{families}.",
            option=key,
        )


def _referencing(df: DataFrame, row_id: list[str] | None) -> DataFrame:
    """``df``, failing analysis as the client's plan would when a row id column is not in
    the table (``UNRESOLVED_COLUMN``) or a column uses our helper prefix; both tests fold
    away. The source checks the row id too, but only after Spark's analysis."""
    if row_id is not None:
        df = df.where(F.struct(*[F.col(c) for c in row_id]).isNull() | F.lit(True))
    return refuse_reserved_columns(df)


def _where(value: OptionValue) -> str:
    where = str(value).strip().lower()
    if where not in _WHERE:
        raise invalid_option(
            "INVALID_POST_PROCESSING",
            f"Option 'postProcessing' must be 'source' (the source resolves carry-overs and "
            f"updates) or 'client' (the client-built plan does), got {value!r}.",
            option=_POST_PROCESSING,
            value=str(value),
        )
    return where


def _row_id(value: OptionValue) -> list[str]:
    columns = [c.strip() for c in str(value).split(",")]
    if not all(columns):
        raise missing_row_id(
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
