"""The options a change-feed reader was given, sorted where each goes: the row id, Spark's
CDC options (the client's range filter and passes), the source's own options, and where
post-processing runs. Unknown options are refused here, in the user's spelling, with the
option meant suggested: the source on the server would name them only in its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from spark_cdc.range_hints import option_text
from spark_cdc.rewrite.errors import as_analysis_exception, cdc_error
from spark_cdc.rewrite.options import KNOWN_OPTIONS, OptionValue
from spark_cdc.server_plugin.cdc_options import row_id as row_id_columns
from spark_cdc.server_plugin.cdc_options import unknown_option
from spark_cdc.server_plugin.errors import ChangelogSourceError
from spark_cdc.sources import ChangelogSource

_CDC_OPTIONS = {name.lower(): name for name in KNOWN_OPTIONS}
ROW_ID = "rowId"
POST_PROCESSING = "postProcessing"
_WHERE = ("source", "client")


class SortedOptions(NamedTuple):
    row_id: list[str] | None
    cdc: dict[str, OptionValue]  # Spark's CDC options, by Spark's names
    source: dict[str, str]  # the source's own, as text
    where: str  # where post-processing runs: source or client


def sorted_options(
    options: Mapping[str, OptionValue], source: ChangelogSource, streaming: bool
) -> SortedOptions:
    """``options`` (keys in any case) sorted for a read of ``source``."""
    if source.check_options is not None:
        try:
            source.check_options(options)
        except ChangelogSourceError as refused:
            raise as_analysis_exception(refused) from None
    known = _known(source)
    row_id: list[str] | None = None
    where = "source"
    cdc: dict[str, OptionValue] = {}
    own: dict[str, str] = {}
    prefixes = tuple(p.lower() for p in source.option_prefixes)
    for key, value in options.items():
        name = known.get(key.lower())
        if name == ROW_ID:
            row_id = _row_id(value)
        elif name == POST_PROCESSING:
            where = _where(value)
        elif key.lower() in _CDC_OPTIONS:
            cdc[_CDC_OPTIONS[key.lower()]] = value
        elif name is not None or key.lower().startswith(prefixes):
            own[key] = option_text(value)
        else:
            families = "".join(f" and {p}<KEY>" for p in source.option_prefixes)
            unknown = unknown_option(key, known.values(), "ChangelogReader", families)
            raise as_analysis_exception(unknown)
    named = str(cdc.get("startingVersion", "")).strip().lower()
    if named == "latest":  # the source's own refusal in a batch read, said here first
        if not streaming:
            raise cdc_error("INVALID_CDC_OPTION.LATEST_IN_BATCH")
        own["startingVersion"] = "latest"
        del cdc["startingVersion"]
    if named == "earliest":  # only the source knows which version that is
        own["startingVersion"] = "earliest"
        cdc["startingVersion"] = 0  # the rows' range filter: everything the source serves
    return SortedOptions(row_id, cdc, own, where)


def _known(source: ChangelogSource) -> dict[str, str]:
    """Every option a read of ``source`` takes, by its lower-case name."""
    own = {name.lower(): name for name in source.options}
    return {ROW_ID.lower(): ROW_ID, POST_PROCESSING.lower(): POST_PROCESSING, **_CDC_OPTIONS, **own}


def _where(value: OptionValue) -> str:
    where = str(value).strip().lower()
    if where not in _WHERE:
        raise cdc_error(
            "INVALID_CDC_OPTION.INVALID_POST_PROCESSING", option=POST_PROCESSING, value=value
        )
    return where


def _row_id(value: OptionValue) -> list[str]:
    try:
        return list(row_id_columns(value))
    except ChangelogSourceError as refused:
        raise as_analysis_exception(refused) from None
