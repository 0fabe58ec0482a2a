"""``decode_changes``: CDC envelopes (Debezium, Maxwell, Canal, GoldenGate JSON) as a change
feed in Spark's changelog shape, batch or streaming.

Where a CDC pipeline already runs, changes arrive as JSON envelopes in Kafka topics or in
files a Kafka Connect sink wrote. This turns a DataFrame of them (Kafka's ``value``, a text
file's ``value``) into the row's columns and ``_change_type``, ``_commit_version``,
``_commit_timestamp``: what ``apply_changes``, ``post_process`` and the command line read.
Flink reads the same envelopes as formats of the same names.

The plan is built on the client from stock functions (``from_json``, ``posexplode``,
``explode``, ``when``, casts), so it runs vectorized on the server on any of its Pythons,
streaming included, and building it makes no round trip: except when a Debezium feed's
schema is left to the envelope's own ``schema`` wrapper, which costs one (one event is
read, as ``spark.read.json`` infers a schema), or ``schema`` is a DDL string (Spark parses
it). Ordering: ``spark_cdc.rewrite.envelope_positions``. Bad events: a named error raised in
the query (``INVALID_CDC_ENVELOPE.MALFORMED_EVENT``, ``.NO_POSITION``) by default, or, as
Spark's JSON reader does, kept (``mode='PERMISSIVE'``, the event's text in
``columnNameOfCorruptRecord``) or dropped (``mode='DROPMALFORMED'``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import types as T
from pyspark.sql.connect import functions as F
from spark_cdc.rewrite.canal_schema import canal_schema
from spark_cdc.rewrite.debezium_schema import row_schema
from spark_cdc.rewrite.envelope_formats import (
    DDL,
    DDL_TEXT,
    FORMATS,
    KIND,
    NO_POSITION,
    PRE,
    PROBLEM,
    RAW,
    ROW,
    SKIP,
    TIMESTAMP,
    USER_VERSION,
    VERSION,
    Rows,
    changes_a_row,
)
from spark_cdc.rewrite.errors import cdc_error
from spark_cdc.rewrite.names import (
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    HELPER_PREFIX,
    UPDATE_POSTIMAGE,
    UPDATE_PREIMAGE,
)
from spark_cdc.rewrite.raised import raise_in_query

MODES = ("FAILFAST", "PERMISSIVE", "DROPMALFORMED")
OPTIONS = ("columnNameOfCorruptRecord", "includeDdl", "mode")
DEFAULT_CORRUPT_COLUMN = "_corrupt_record"
DDL_COLUMN = "_ddl"  # with includeDdl: a schema change's statement
EVENT_CHARS = 300  # how much of a bad event an error shows
_IMAGE = HELPER_PREFIX + "image"


def decode_changes(
    df: DataFrame,
    format: str = "debezium-json",
    schema: T.StructType | str | None = None,
    *,
    column: str | Column = "value",
    version: str | Column | None = None,
    parsed: bool = False,
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """The changes a DataFrame of CDC envelopes holds, in Spark's changelog shape.

    ``format`` is Flink's name of the envelope: ``debezium-json``, ``maxwell-json``,
    ``canal-json`` or ``ogg-json``. ``column`` holds one envelope per row, as a string or
    binary (Kafka's ``value``, a text file's line); ``parsed=True`` when it is already a
    struct. A NULL envelope (Kafka's tombstone after a delete) is skipped.

    ``schema`` is the table's columns (a ``StructType``, or a DDL string, which Spark
    parses in one round trip). For ``debezium-json`` it may be left out when the envelopes
    carry Debezium's ``schema``/``payload`` wrapper: the first envelope's schema is read
    then (one round trip, batch only); for ``canal-json`` likewise, from the first
    message's ``sqlType``/``mysqlType``. Maxwell and GoldenGate carry no usable schema.

    ``_commit_version`` is the source's own log position of each change (PostgreSQL's LSN,
    MySQL's binlog file and position, Maxwell's ``xid``/``xoffset``, Canal's ``id`` and row,
    GoldenGate's ``pos``), so two changes of one key in one transaction are ordered and
    distinct, and ``apply_changes(feed, keys, sequence_by="_commit_version")`` applies them
    in order. ``version`` names a column of ``df`` (a long) to use instead where the
    envelope has no usable position. ``_commit_timestamp`` is the source's commit time.

    ``options``: ``mode`` (``FAILFAST``, the default: a bad event fails the query with a
    named error; ``PERMISSIVE``: it becomes a row of NULLs with its text in
    ``columnNameOfCorruptRecord``, default ``_corrupt_record``; ``DROPMALFORMED``: it is
    left out); ``includeDdl`` (``false``, the default: schema changes, such as Debezium's
    schema change events, Maxwell's ``table-alter`` and Canal's ``isDdl`` messages, are
    left out; ``true``: each is a row of ``_change_type`` ``ddl`` with NULL columns, its
    statement in a ``_ddl`` column, NULL on the other rows).

    Examples
    --------
    >>> feed = spark_cdc.decode_changes(
    ...     spark.read.text("/data/orders-topic"), "debezium-json", "id INT, total DOUBLE"
    ... )
    >>> spark_cdc.apply_changes(feed, "/tables/orders", keys=["id"],
    ...                         sequence_by="_commit_version")
    """
    decode = _format(format)
    mode, corrupt, include_ddl = _options(options)
    text = _text(column, parsed)
    user_version = _version(version)
    events = df.select(text.alias(RAW), user_version.alias(USER_VERSION)).where(
        F.col(RAW).isNotNull()
    )
    decoded = decode(events, _rows(df, format, schema, text))
    if version is not None:
        decoded = decoded.withColumn(VERSION, F.col(USER_VERSION)).withColumn(
            NO_POSITION,
            F.when(
                F.col(USER_VERSION).isNull() & changes_a_row(F.col(KIND)),
                F.lit("the version column is NULL"),
            ),
        )
    return _changes(decoded, format, mode, corrupt, include_ddl)


def _format(name: str) -> Any:
    if not isinstance(name, str) or name not in FORMATS:
        raise cdc_error(
            "INVALID_CDC_OPTION.UNKNOWN_FORMAT",
            format=name,
            proposal=_closest(str(name), list(FORMATS)),
            formats=", ".join(FORMATS),
        )
    return FORMATS[name]


def _invalid(parameter: str, problem: str, fix: str) -> Exception:
    return cdc_error(
        "INVALID_CDC_ENVELOPE.INVALID_PARAMETER", parameter=parameter, problem=problem, fix=fix
    )


def _closest(given: str, names: list[str]) -> str:
    import difflib

    found = difflib.get_close_matches(given.lower(), names, n=1, cutoff=0.0)
    return found[0] if found else names[0]


def _options(options: Mapping[str, str] | None) -> tuple[str, str, bool]:
    given = dict(options or {})
    for name in given:
        if name not in OPTIONS:
            raise cdc_error(
                "INVALID_CDC_OPTION.UNKNOWN_OPTION",
                reader="decode_changes",
                option=name,
                proposal=_closest(name, list(OPTIONS)),
                options=", ".join(OPTIONS),
            )
    mode = str(given.get("mode", "FAILFAST")).upper()
    if mode not in MODES:
        raise _invalid(
            "mode", f"is {given.get('mode')!r}", "use FAILFAST, PERMISSIVE or DROPMALFORMED"
        )
    corrupt = str(given.get("columnNameOfCorruptRecord", DEFAULT_CORRUPT_COLUMN))
    if not corrupt.strip():
        raise _invalid(
            "columnNameOfCorruptRecord", "is empty", "name a column for the bad events' text"
        )
    include_ddl = str(given.get("includeDdl", "false")).lower()
    if include_ddl not in ("true", "false"):
        raise _invalid("includeDdl", f"is {given.get('includeDdl')!r}", "use true or false")
    return mode, corrupt, include_ddl == "true"


def _text(column: str | Column, parsed: bool) -> Column:
    if not isinstance(column, str | Column):
        raise _invalid(
            "column", f"is {column!r}", "name the column of envelopes, or pass it as a Column"
        )
    value = F.col(column) if isinstance(column, str) else column
    # A parsed struct goes back through JSON, so that every path parses the same way.
    return F.to_json(value) if parsed else value.cast("string")


def _version(version: str | Column | None) -> Column:
    if version is None:
        return F.lit(None).cast("long")
    if not isinstance(version, str | Column):
        raise _invalid(
            "version",
            f"is {version!r}",
            "name a column of the envelopes' DataFrame, or pass a Column",
        )
    return (F.col(version) if isinstance(version, str) else version).cast("long")


def _rows(df: DataFrame, format: str, schema: T.StructType | str | None, text: Column) -> Rows:
    if isinstance(schema, str):
        schema = _ddl(schema)
    if isinstance(schema, T.StructType):
        if not schema.fields:
            raise _invalid("schema", "has no columns", "give the table's columns")
        return Rows(schema, lambda row: row)
    if schema is not None:
        raise _invalid(
            "schema",
            f"is {type(schema).__name__}",
            "pass a StructType or a DDL string such as 'id INT, name STRING'",
        )
    if format == "canal-json":
        return _canal_types(df, text)
    if format != "debezium-json":
        raise cdc_error(
            "INVALID_CDC_ENVELOPE.SCHEMA_REQUIRED",
            format=format,
            why="(its events carry no schema of the table)",
        )
    return _wrapper_schema(df, text)


CANAL_LOOKAHEAD = 100  # messages read for one that carries types (DDL messages carry none)


def _canal_types(df: DataFrame, text: Column) -> Rows:
    """The rows' schema from the first Canal message with column types: one round trip,
    so refused for a stream."""
    if df.isStreaming:
        raise cdc_error(
            "INVALID_CDC_ENVELOPE.SCHEMA_REQUIRED",
            format="canal-json",
            why="(a stream cannot be read for its messages' column types before it starts)",
        )
    first = df.select(text.alias(RAW)).where(F.col(RAW).isNotNull()).limit(CANAL_LOOKAHEAD)
    for row in first.collect():
        message = _loaded(row[0])
        found = canal_schema(message) if isinstance(message, dict) else None
        if found is not None:
            return Rows(found, lambda parsed: parsed)
    raise cdc_error(
        "INVALID_CDC_ENVELOPE.SCHEMA_REQUIRED",
        format="canal-json",
        why=f"(none of its first {CANAL_LOOKAHEAD} messages carries sqlType)",
    )


def _ddl(ddl: str) -> T.StructType:
    parsed = T.DataType.fromDDL(ddl)
    if not isinstance(parsed, T.StructType):
        raise _invalid(
            "schema", f"{ddl!r} is not a list of columns", "write it as 'id INT, name STRING'"
        )
    return parsed


def _wrapper_schema(df: DataFrame, text: Column) -> Rows:
    """The rows' schema from the first envelope's Debezium ``schema`` wrapper: one round
    trip, so refused for a stream (which cannot be read before it starts)."""
    if df.isStreaming:
        raise cdc_error(
            "INVALID_CDC_ENVELOPE.SCHEMA_REQUIRED",
            format="debezium-json",
            why="(a stream cannot be read for its schema wrapper before it starts)",
        )
    first = df.select(text.alias(RAW)).where(F.col(RAW).isNotNull()).limit(1).collect()
    wrapper = _loaded(first[0][0] if first else None)
    if not isinstance(wrapper, dict) or not isinstance(wrapper.get("schema"), dict):
        raise cdc_error(
            "INVALID_CDC_ENVELOPE.SCHEMA_REQUIRED",
            format="debezium-json",
            why="(its first event has no schema wrapper: the connector runs with "
            "value.converter.schemas.enable=false)",
        )
    found = row_schema(wrapper["schema"])
    return Rows(found.raw, found.convert)


def _loaded(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def _changes(
    decoded: DataFrame, format: str, mode: str, corrupt: str, include_ddl: bool
) -> DataFrame:
    """The decoded events as changelog rows: bad ones raised, kept or dropped by ``mode``;
    events that change no row left out (schema changes too, unless ``include_ddl``); an
    update with a pre-image as two rows."""
    problem, no_position = F.col(PROBLEM), F.col(NO_POSITION)
    bad = problem.isNotNull() | no_position.isNotNull()
    event = F.substring(F.col(RAW), 1, EVENT_CHARS)
    kind = F.col(KIND)
    extra = [F.col(DDL_TEXT).alias(DDL_COLUMN)] if include_ddl else []
    if mode == "FAILFAST":
        kind = (
            F.when(
                problem.isNotNull(),
                raise_in_query(
                    "INVALID_CDC_ENVELOPE.MALFORMED_EVENT",
                    format=F.lit(format),
                    problem=problem,
                    event=event,
                ),
            )
            .when(
                no_position.isNotNull(),
                raise_in_query(
                    "INVALID_CDC_ENVELOPE.NO_POSITION",
                    format=F.lit(format),
                    problem=no_position,
                    event=event,
                ),
            )
            .otherwise(kind)
        )
    elif mode == "DROPMALFORMED":
        kind = F.when(~bad, kind).otherwise(F.lit(SKIP))
    else:
        kind = F.when(~bad, kind)
        extra.append(F.when(bad, F.col(RAW)).alias(corrupt))
    decoded = decoded.withColumn(KIND, kind)
    kind = F.col(KIND)
    good = ~bad if mode == "PERMISSIVE" else F.lit(True)
    row, pre = F.when(good, F.col(ROW)), F.col(PRE)
    # No filter: events that change no row explode a NULL array into no rows (a filter
    # would be pushed below the projections, copying their expressions into it).
    left_out = kind == SKIP if include_ddl else kind.isin(SKIP, DDL)
    images = (
        F.when(left_out, F.lit(None))
        .when(
            good & (kind == "update") & pre.isNotNull(),
            F.array(_image(pre, F.lit(UPDATE_PREIMAGE)), _image(row, F.lit(UPDATE_POSTIMAGE))),
        )
        .otherwise(
            F.array(_image(row, F.when(kind == "update", F.lit(UPDATE_POSTIMAGE)).otherwise(kind)))
        )
    )
    exploded = decoded.select(
        F.explode(images).alias(_IMAGE),
        F.when(good, F.col(VERSION)).alias(COMMIT_VERSION),
        F.when(good, F.col(TIMESTAMP)).alias(COMMIT_TIMESTAMP),
        *extra,
    )
    kept = [F.col(f"`{column}`") for column in ([DDL_COLUMN] if include_ddl else [])]
    kept += [F.col(f"`{corrupt}`")] if mode == "PERMISSIVE" else []
    return exploded.select(
        F.col(f"{_IMAGE}.row.*"),
        F.col(f"{_IMAGE}.type").alias(CHANGE_TYPE),
        COMMIT_VERSION,
        COMMIT_TIMESTAMP,
        *kept,
    )


def _image(row: Column, change_type: Column) -> Column:
    return F.struct(row.alias("row"), change_type.alias("type"))
