"""A schema given to ``ChangelogReader.schema``: its column names, read on the client (a
DDL string's too, with no server round trip: Spark Connect parses DDL on the server), and
the schema the source is given, with the changelog columns the client's range filter needs.

The source checks the schema against the feed (``changelog_schema.projection``); here
only names matter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.types import LongType, StructField, StructType, TimestampType
from spark_cdc.rewrite.errors import cdc_error
from spark_cdc.rewrite.options import CdcOptions
from spark_cdc.server_plugin.vocabulary import COMMIT_TIMESTAMP, COMMIT_VERSION

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from spark_cdc.sources import ChangelogSource

GivenSchema = StructType | str
# The columns the client's range filter (``post_process.restrict_to_range``) reads.
RANGE_COLUMNS = {
    COMMIT_VERSION: StructField(COMMIT_VERSION, LongType()),
    COMMIT_TIMESTAMP: StructField(COMMIT_TIMESTAMP, TimestampType()),
}


def column_names(schema: GivenSchema) -> list[str]:
    """The top-level names of ``schema``, a ``StructType`` or DDL (``a INT, `b c` STRING``,
    ``a: int``, ``struct<a: int>``)."""
    if isinstance(schema, StructType):
        return schema.names
    text = schema.strip()
    if text.lower().startswith("struct<") and text.endswith(">"):
        text = text[len("struct<") : -1]
    return [_name(part) for part in _top_level(text) if part.strip()]


def with_range_columns(schema: GivenSchema, needed: list[str]) -> GivenSchema:
    """``schema`` with the range columns of ``needed`` it lacks appended."""
    have = set(column_names(schema))
    missing = [RANGE_COLUMNS[name] for name in needed if name not in have]
    if not missing:
        return schema
    if isinstance(schema, StructType):
        return StructType([*schema.fields, *missing])
    return ", ".join([schema, *(f"`{f.name}` {f.dataType.simpleString()}" for f in missing)])


def range_columns(opts: CdcOptions | None) -> list[str]:
    """The changelog columns the client's range filter reads."""
    needed: list[str] = []
    if opts is None:
        return needed
    if opts.starting_version is not None or opts.ending_version is not None:
        needed.append(COMMIT_VERSION)
    if opts.starting_timestamp is not None or opts.ending_timestamp is not None:
        needed.append(COMMIT_TIMESTAMP)
    return needed


def refuse_where_read_whole(source: ChangelogSource, client_plan_reads_all: bool) -> None:
    """Refuse a schema where the feed is read whole: the source does not take one, or the
    client's plan after the source (``client_plan_reads_all``) needs every column."""
    why = None
    if not source.reads_given_schema:
        why = f"the {source.name} source reads every column"
    elif client_plan_reads_all:
        why = "netChanges and postProcessing=client run on every column after the source"
    if why is not None:
        raise cdc_error("INVALID_CHANGELOG_SCHEMA.READ_SCHEMA_NOT_TAKEN", why=why)


def selected(feed: DataFrame, schema: GivenSchema | None) -> DataFrame:
    """The given schema's columns only, where the range filter read more."""
    if schema is None:
        return feed
    names = column_names(schema)
    return feed if feed.columns == names else feed.select(*names)


def _top_level(text: str) -> list[str]:
    """``text`` split at the commas outside brackets, quotes and backquotes."""
    parts, current, depth, quote = [], "", 0, ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "`'\"":
            quote = char
        elif char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += char
    return [*parts, current]


def _name(field: str) -> str:
    """A field's name: backquoted (```` doubles a backquote) or up to a space or colon."""
    field = field.strip()
    if not field.startswith("`"):
        end = min((i for i, c in enumerate(field) if c.isspace() or c == ":"), default=len(field))
        return field[:end]
    name, at = "", 1
    while at < len(field):
        if field[at] == "`":
            if field[at + 1 : at + 2] != "`":
                break
            at += 1
        name += field[at]
        at += 1
    return name
