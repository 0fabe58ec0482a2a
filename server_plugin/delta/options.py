"""``delta_changelog`` options: the common ones
(``spark_cdc.server_plugin.changefeed.source_options``),
with ``storage.<KEY>`` going to delta-rs as storage options."""

from __future__ import annotations

from collections.abc import Mapping

from spark_cdc.server_plugin.changefeed.source_options import (
    STORAGE_PREFIX,
    OptionSet,
    SourceOptions,
    parse_source_options,
)

SOURCE = "delta_changelog"
ACCEPTED = OptionSet(SOURCE, prefixes=((STORAGE_PREFIX, "delta-rs storage options"),))


def parse_delta_options(raw: Mapping[str, str], streaming: bool = False) -> SourceOptions:
    return parse_source_options(raw, ACCEPTED, streaming)
