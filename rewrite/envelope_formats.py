"""Each envelope format, read into one shape that ``spark_cdc.rewrite.envelopes`` turns into
changelog rows: the event's text, its row (``ROW``) and, for an update, the row before
(``PRE``), what kind of change it is (``KIND``: insert, update, delete, truncate, ddl for a
schema change (its statement in ``DDL_TEXT``), or skip for other events that change no row),
its version and commit time, and why it cannot be read (``PROBLEM``, ``NO_POSITION``: NULL
when it can).

All of it is stock column functions over ``from_json`` (parsed with Spark's PERMISSIVE
mode and a corrupt-record field, so malformed JSON and values that do not fit the schema
are found per event, never silently NULL). Flink's formats of the same names
(``flink-formats/flink-json``) read the same envelopes; the differences are in
``docs/change-envelopes.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import types as T
from pyspark.sql.connect import functions as F
from spark_cdc.rewrite.envelope_positions import (
    canal_version,
    debezium_version,
    maxwell_version,
    mysql_file_number,
    mysql_offset,
    ogg_version,
)
from spark_cdc.rewrite.names import HELPER_PREFIX

RAW = HELPER_PREFIX + "raw"  # the event's JSON text
USER_VERSION = HELPER_PREFIX + "user_version"  # the caller's version column, if any
ROW = HELPER_PREFIX + "row"
PRE = HELPER_PREFIX + "pre"
KIND = HELPER_PREFIX + "kind"
VERSION = HELPER_PREFIX + "version"
TIMESTAMP = HELPER_PREFIX + "timestamp"
PROBLEM = HELPER_PREFIX + "problem"
NO_POSITION = HELPER_PREFIX + "no_position"
CORRUPT = HELPER_PREFIX + "corrupt"
PARSED = HELPER_PREFIX + "parsed"
DDL_TEXT = HELPER_PREFIX + "ddl"
SKIP = "skip"
DDL = "ddl"

_PERMISSIVE = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
_UNREADABLE = "is not JSON, or a value in it does not fit the schema"


@dataclass(frozen=True)
class Rows:
    """The rows' schema as the JSON is parsed (``parsed``), and how a parsed row becomes the
    served one (``convert``: identity for a schema the caller gave)."""

    parsed: T.StructType
    convert: Callable[[Column], Column]


def _field(name: str, data_type: T.DataType) -> T.StructField:
    return T.StructField(name, data_type, True)


def _parse(events: DataFrame, fields: list[T.StructField]) -> DataFrame:
    """The events with their parsed envelope. The parse sits in a generator (``explode`` of
    a one-element array), which Spark's optimizer never inlines into the expressions that
    read it: as a plain column, predicate pushdown and project collapsing copied
    ``from_json`` into each of its dozens of uses, and the JSON was parsed that many times
    (4x slower than one ``from_json`` in ``tests/bench/envelopes.py``)."""
    schema = T.StructType([*fields, _field(CORRUPT, T.StringType())])
    parsed = F.from_json(F.col(RAW), schema, _PERMISSIVE)
    return events.select("*", F.explode(F.array(parsed)).alias(PARSED))


def _staged(frame: DataFrame, **columns: Column) -> tuple[DataFrame, dict[str, Column]]:
    """``frame`` with ``columns`` computed once, and references to them. An expression used
    many times is a column of its own: inlined into each use, the generated code outgrew
    what the JVM compiles and ran interpreted (2-3x slower in the benchmark)."""
    names = {name: f"{HELPER_PREFIX}{name}" for name in columns}
    staged = frame.select("*", *[c.alias(names[n]) for n, c in columns.items()])
    return staged, {n: F.col(names[n]) for n in columns}


def _p(name: str) -> Column:
    return F.col(PARSED).getField(name)


def changes_a_row(kind: Column) -> Column:
    """Whether an event of ``kind`` changes a row (a skipped event or a DDL one does not:
    it needs no row, no position and no commit time)."""
    return ~kind.isin(SKIP, DDL)


def _unreadable() -> Column:
    return F.col(PARSED).isNull() | _p(CORRUPT).isNotNull()


def _shaped(
    frame: DataFrame,
    row: Column,
    pre: Column,
    kind: Column,
    version: tuple[Column, Column],
    timestamp: Column,
    problem: Column,
    ddl: Column | None = None,
) -> DataFrame:
    no_time = F.when(timestamp.isNull() & changes_a_row(kind), F.lit("has no commit time"))
    return frame.select(
        F.col(RAW),
        F.col(USER_VERSION),
        row.alias(ROW),
        pre.alias(PRE),
        kind.alias(KIND),
        version[0].cast("long").alias(VERSION),
        timestamp.alias(TIMESTAMP),
        F.coalesce(problem, no_time).alias(PROBLEM),
        F.when(changes_a_row(kind), version[1]).alias(NO_POSITION),
        (F.lit(None).cast("string") if ddl is None else F.when(kind == DDL, ddl)).alias(DDL_TEXT),
    )


def _op_problem(op: Column, known: str) -> Column:
    return F.when(op.isNull(), F.lit("has no operation")).otherwise(
        F.concat(F.lit("has operation '"), op, F.lit(f"', not one of {known}"))
    )


def debezium(events: DataFrame, rows: Rows) -> DataFrame:
    """Debezium's envelope, bare or inside its ``schema``/``payload`` wrapper: ``op`` c and
    r (a snapshot read) insert, u updates (``before`` is the pre-image where the table
    logs it), d deletes (``before`` holds at least the key), t truncates; a schema change
    event (no ``op``, its statement in ``ddl``) is DDL."""
    source = T.StructType(
        [
            _field("connector", T.StringType()),
            _field("lsn", T.LongType()),
            _field("file", T.StringType()),
            _field("pos", T.LongType()),
            _field("row", T.IntegerType()),
            _field("ts_ms", T.LongType()),
            _field("ts_us", T.LongType()),
        ]
    )
    body = [
        _field("before", rows.parsed),
        _field("after", rows.parsed),
        _field("op", T.StringType()),
        _field("ts_ms", T.LongType()),
        _field("source", source),
        _field("ddl", T.StringType()),
    ]
    frame = _parse(events, [_field("payload", T.StructType(body)), *body])

    def pick(name: str) -> Column:
        return F.coalesce(_p("payload").getField(name), _p(name))

    frame, parts = _staged(
        frame,
        op=pick("op"),
        before=pick("before"),
        after=pick("after"),
        src=pick("source"),
        ts_ms=pick("ts_ms"),
        ddl=pick("ddl"),
    )
    op, before, after, src = parts["op"], parts["before"], parts["after"], parts["src"]
    frame, got = _staged(
        frame,
        kind=F.when(op.isin("c", "r"), F.lit("insert"))
        .when(op == "u", F.lit("update"))
        .when(op == "d", F.lit("delete"))
        .when(op == "t", F.lit("truncate"))
        .when(op.isNull() & parts["ddl"].isNotNull(), F.lit(DDL)),
        file_number=mysql_file_number(src),
        offset=mysql_offset(src),
    )
    kind = got["kind"]
    problem = (
        F.when(_unreadable(), F.lit(_UNREADABLE))
        .when(kind.isNull(), _op_problem(op, "c, r, u, d, t"))
        .when(kind.isin("insert", "update") & after.isNull(), F.lit("has no after image"))
        .when(
            (kind == "delete") & before.isNull(),
            F.lit(
                "is a delete without a before image (a PostgreSQL table under REPLICA "
                "IDENTITY NOTHING logs none; set it to DEFAULT or FULL)"
            ),
        )
    )
    timestamp = F.coalesce(
        F.timestamp_micros(src.getField("ts_us")),
        F.timestamp_millis(src.getField("ts_ms")),
        F.timestamp_millis(parts["ts_ms"]),
    )
    row = F.when(kind == "delete", before).when(kind != "truncate", after)
    return _shaped(
        frame,
        rows.convert(row),
        rows.convert(F.when(kind == "update", before)),
        kind,
        debezium_version(src, got["file_number"], got["offset"]),
        timestamp,
        problem,
        parts["ddl"],
    )


def _typed(texts: Column, schema: T.StructType) -> tuple[Column, Column]:
    """A struct of text values cast to ``schema``'s types, and whether a value did not fit
    (a text that is not NULL and casts to NULL)."""
    casts = [texts.getField(f.name).try_cast(f.dataType) for f in schema.fields]
    misfit = F.lit(False)
    for field, cast in zip(schema.fields, casts, strict=True):
        misfit = misfit | (texts.getField(field.name).isNotNull() & cast.isNull())
    row = F.struct(*[c.alias(f.name) for f, c in zip(schema.fields, casts, strict=True)])
    return F.when(texts.isNotNull(), row), F.coalesce(misfit, F.lit(False))


def _before(after: Column, old: Column, schema: T.StructType) -> tuple[Column, Column]:
    """The row before an update that changed the columns ``old`` (a map of column name to
    its old value as text) holds: theirs from ``old``, the others from ``after``."""
    values, misfit = [], F.lit(False)
    for field in schema.fields:
        changed = F.coalesce(F.map_contains_key(old, field.name), F.lit(False))
        text = old.getItem(field.name)
        cast = text.try_cast(field.dataType)
        misfit = misfit | (changed & text.isNotNull() & cast.isNull())
        values.append(F.when(changed, cast).otherwise(after.getField(field.name)))
    row = F.struct(*[v.alias(f.name) for f, v in zip(schema.fields, values, strict=True)])
    return F.when(old.isNotNull(), row), misfit


_MAXWELL_SKIPPED = ("bootstrap-start", "bootstrap-complete")
_MAXWELL_DDL = (
    "table-create",
    "table-alter",
    "table-drop",
    "database-create",
    "database-alter",
    "database-drop",
)


def maxwell(events: DataFrame, rows: Rows) -> DataFrame:
    """Maxwell's events: ``data`` is the row (the deleted row for a delete); an update's
    ``old`` holds only the columns it changed, with their old values; DDL events (their
    statement in ``sql``) and bootstrap markers change no row."""
    texts = T.MapType(T.StringType(), T.StringType())
    frame = _parse(
        events,
        [
            _field("type", T.StringType()),
            _field("ts", T.LongType()),
            _field("xid", T.LongType()),
            _field("xoffset", T.LongType()),
            _field("commit", T.BooleanType()),
            _field("data", rows.parsed),
            _field("old", texts),
            _field("sql", T.StringType()),
        ],
    )
    op, data = _p("type"), _p("data")
    kind = (
        F.when(op.isin("insert", "bootstrap-insert"), F.lit("insert"))
        .when(op == "update", F.lit("update"))
        .when(op == "delete", F.lit("delete"))
        .when(op.isin(*_MAXWELL_SKIPPED), F.lit(SKIP))
        .when(op.isin(*_MAXWELL_DDL), F.lit(DDL))
    )
    frame, got = _staged(frame, kind=kind)
    kind = got["kind"]
    pre, misfit = _before(data, _p("old"), rows.parsed)
    problem = (
        F.when(_unreadable(), F.lit(_UNREADABLE))
        .when(kind.isNull(), _op_problem(op, "insert, update, delete"))
        .when(changes_a_row(kind) & data.isNull(), F.lit("has no data"))
        .when((kind == "update") & misfit, F.lit("has an old value that does not fit the schema"))
    )
    version = maxwell_version(_p("xid"), _p("xoffset"), F.coalesce(_p("commit"), F.lit(False)))
    return _shaped(
        frame,
        data,
        F.when(kind == "update", pre),
        kind,
        version,
        F.timestamp_seconds(_p("ts")),
        problem,
        _p("sql"),
    )


def canal(events: DataFrame, rows: Rows) -> DataFrame:
    """Canal's flat messages: ``data`` is an array of rows (one change each), every value a
    string, cast here to the schema's types; an update's ``old`` array holds, per row, the
    columns it changed; DDL messages (``isDdl``, their statement in ``sql``) change no row."""
    text_row = T.StructType([_field(f.name, T.StringType()) for f in rows.parsed.fields])
    texts = T.MapType(T.StringType(), T.StringType())
    frame = _parse(
        events,
        [
            _field("type", T.StringType()),
            _field("isDdl", T.BooleanType()),
            _field("es", T.LongType()),
            _field("id", T.LongType()),
            _field("data", T.ArrayType(text_row)),
            _field("old", T.ArrayType(texts)),
            _field("sql", T.StringType()),
        ],
    )
    index, element = HELPER_PREFIX + "index", HELPER_PREFIX + "element"
    frame = frame.select("*", F.posexplode_outer(_p("data")).alias(index, element))
    op, ddl = F.upper(_p("type")), F.coalesce(_p("isDdl"), F.lit(False))
    kind = (
        F.when(ddl, F.lit(DDL))
        .when(op == "INSERT", F.lit("insert"))
        .when(op == "UPDATE", F.lit("update"))
        .when(op == "DELETE", F.lit("delete"))
    )
    frame, got = _staged(frame, kind=kind)
    kind = got["kind"]
    row, misfit = _typed(F.col(element), rows.parsed)
    old = F.element_at(_p("old"), F.col(index) + 1)
    pre, old_misfit = _before(row, old, rows.parsed)
    problem = (
        F.when(_unreadable(), F.lit(_UNREADABLE))
        .when(kind.isNull(), _op_problem(_p("type"), "INSERT, UPDATE, DELETE"))
        .when(changes_a_row(kind) & F.col(element).isNull(), F.lit("has no data"))
        .when(
            changes_a_row(kind) & (misfit | old_misfit),
            F.lit("has a value that does not fit the schema"),
        )
    )
    # A DDL message has no rows: it takes its message's first position.
    version = canal_version(_p("id"), F.coalesce(F.col(index), F.lit(0)))
    return _shaped(
        frame,
        row,
        F.when(kind == "update", pre),
        kind,
        version,
        F.timestamp_millis(_p("es")),
        problem,
        _p("sql"),
    )


def ogg(events: DataFrame, rows: Rows) -> DataFrame:
    """Oracle GoldenGate's JSON: ``op_type`` I, U, D, T; ``before`` and ``after`` images;
    ``pos`` its trail position; ``op_ts`` the operation's commit time (read in the
    session's time zone)."""
    frame = _parse(
        events,
        [
            _field("op_type", T.StringType()),
            _field("op_ts", T.StringType()),
            _field("pos", T.StringType()),
            _field("before", rows.parsed),
            _field("after", rows.parsed),
        ],
    )
    op, before, after = _p("op_type"), _p("before"), _p("after")
    kind = (
        F.when(op == "I", F.lit("insert"))
        .when(op == "U", F.lit("update"))
        .when(op == "D", F.lit("delete"))
        .when(op == "T", F.lit("truncate"))
    )
    frame, got = _staged(frame, kind=kind)
    kind = got["kind"]
    problem = (
        F.when(_unreadable(), F.lit(_UNREADABLE))
        .when(kind.isNull(), _op_problem(op, "I, U, D, T"))
        .when(kind.isin("insert", "update") & after.isNull(), F.lit("has no after image"))
        .when((kind == "delete") & before.isNull(), F.lit("is a delete without a before image"))
    )
    row = F.when(kind == "delete", before).when(kind != "truncate", after)
    return _shaped(
        frame,
        row,
        F.when(kind == "update", before),
        kind,
        ogg_version(_p("pos")),
        F.try_to_timestamp(_p("op_ts")),
        problem,
    )


FORMATS: dict[str, Callable[[DataFrame, Rows], DataFrame]] = {
    "canal-json": canal,
    "debezium-json": debezium,
    "maxwell-json": maxwell,
    "ogg-json": ogg,
}
