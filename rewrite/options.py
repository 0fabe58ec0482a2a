"""CDC read options: Spark 4.2's names, defaults and error conditions.

The checks are the sources' own (``spark_cdc.server_plugin.cdc_options``), in Spark's order
(``ChangelogInfoUtils.fromOptions``), so a request with several mistakes reports the same
one first, in the same words, on both sides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from spark_cdc.rewrite.errors import as_analysis_exception
from spark_cdc.rewrite.timestamps import is_spark_timestamp
from spark_cdc.server_plugin import cdc_options
from spark_cdc.server_plugin.errors import ChangelogSourceError

OptionValue = str | bool | int


class DeduplicationMode(str, Enum):
    """Spark's ``deduplicationMode``: ``none`` keeps every change; ``dropCarryovers`` removes
    rows a commit rewrote unchanged; ``netChanges`` also collapses each row id's changes to
    their net effect. A member is its option value wherever an option is given
    (``.option("deduplicationMode", DeduplicationMode.NET_CHANGES)``): a ``str`` whose
    ``str()`` is Spark's name for the mode, not ``DeduplicationMode.NET_CHANGES``.

    Examples
    --------
    >>> from spark_cdc import DeduplicationMode
    >>> str(DeduplicationMode.NET_CHANGES)
    'netChanges'
    >>> DeduplicationMode("dropCarryovers") is DeduplicationMode.DROP_CARRYOVERS
    True
    >>> feed = (
    ...     spark_cdc.read(spark)
    ...     .option("rowId", "id")
    ...     .option("deduplicationMode", DeduplicationMode.NET_CHANGES)
    ...     .load("/data/orders")
    ... )  # doctest: +SKIP
    """

    NONE = "none"
    DROP_CARRYOVERS = "dropCarryovers"
    NET_CHANGES = "netChanges"

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class CdcOptions:
    """Spark's CDC options of a read, typed: Spark's option names in snake case, with
    Spark's defaults. ``parse_options`` makes one from option strings;
    ``post_process(df, spec, CdcOptions(...))`` takes one, checked as the strings are.

    Examples
    --------
    >>> from spark_cdc import CdcOptions, ChangelogSpec, DeduplicationMode, post_process
    >>> options = CdcOptions(
    ...     deduplication_mode=DeduplicationMode.NET_CHANGES, starting_version=2
    ... )
    >>> options.to_options()
    {'deduplicationMode': 'netChanges', 'startingVersion': 2}
    >>> out = post_process(feed, ChangelogSpec(row_id=["id"]), options)  # doctest: +SKIP
    """

    deduplication_mode: DeduplicationMode = DeduplicationMode.DROP_CARRYOVERS
    compute_updates: bool = False
    starting_version: int | None = None
    ending_version: int | None = None
    starting_timestamp: str | None = None
    ending_timestamp: str | None = None
    starting_bound_inclusive: bool = True
    ending_bound_inclusive: bool = True

    def to_options(self) -> dict[str, OptionValue]:
        """The options as Spark spells them, those that differ from Spark's defaults."""
        names = {
            "deduplication_mode": "deduplicationMode",
            "compute_updates": "computeUpdates",
            "starting_version": "startingVersion",
            "ending_version": "endingVersion",
            "starting_timestamp": "startingTimestamp",
            "ending_timestamp": "endingTimestamp",
            "starting_bound_inclusive": "startingBoundInclusive",
            "ending_bound_inclusive": "endingBoundInclusive",
        }
        default = CdcOptions()
        given: dict[str, OptionValue] = {}
        for field, name in names.items():
            value = getattr(self, field)
            if value is not None and value != getattr(default, field):
                given[name] = str(value) if isinstance(value, DeduplicationMode) else value
        return given


KNOWN_OPTIONS = cdc_options.CDC_OPTION_NAMES


def parse_options(options: Mapping[str, OptionValue] | None, streaming: bool = False) -> CdcOptions:
    """Spark's CDC options (any key case, str/bool/int values) as ``CdcOptions``, refused
    with Spark's ``INVALID_CDC_OPTION.*`` conditions in Spark's order, by the validator every
    source shares (``spark_cdc.server_plugin.cdc_options``); ``streaming``: an end bound is
    refused first."""
    try:
        given = cdc_options.canonical(
            {k: v for k, v in (options or {}).items() if v is not None}, KNOWN_OPTIONS, "CDC"
        )
        request = cdc_options.check_cdc_options(given, _timestamp, streaming)
    except ChangelogSourceError as refused:
        raise as_analysis_exception(refused) from None
    return CdcOptions(
        deduplication_mode=DeduplicationMode(request.deduplication_mode or "dropCarryovers"),
        compute_updates=bool(request.compute_updates),
        starting_version=request.starting_version,
        ending_version=request.ending_version,
        starting_timestamp=request.starting_timestamp,
        ending_timestamp=request.ending_timestamp,
        starting_bound_inclusive=request.starting_bound_inclusive,
        ending_bound_inclusive=request.ending_bound_inclusive,
    )


def _timestamp(name: str, value: object) -> str:
    """The string as given, for the plan's cast; refused when Spark's cast cannot read it."""
    if not isinstance(value, str) or not is_spark_timestamp(value):
        raise cdc_options.invalid_timestamp(name, value)
    return value.strip()
