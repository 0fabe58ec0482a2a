"""decode_changes on a Spark Connect server: Flink's real envelopes of each format
(``tests/data/envelopes``, see SOURCES.md) decoded to whole expected outputs, batch and
streaming; the feed applied by ``apply_changes``; two changes of one key in one transaction
ordered and never refused; truncates; every bad event by its condition, or kept or dropped
by mode; and the plan built without a round trip."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from spark_cdc import apply_changes, decode_changes

from tests.support.apply_targets import read_table, sorted_rows
from tests.support.envelope_samples import LATER, SAMPLES, SCHEMA, P
from tests.support.feeds import run_stream
from tests.support.rpc_count import counting_rpcs

OUTPUT = T.StructType(
    [
        *SCHEMA.fields,
        T.StructField("_change_type", T.StringType()),
        T.StructField("_commit_version", T.LongType()),
        T.StructField("_commit_timestamp", T.TimestampType()),
    ]
)

PRE, POST = "update_preimage", "update_postimage"
XID = 1 << 24  # Maxwell: xid * 2^24 + xoffset; a commit's last row has no xoffset
CANAL = 1 << 20  # Canal: id * 2^20 + the row's index in data


def _copy(tmp_path: Path, *names: str) -> str:
    folder = tmp_path / "envelopes"
    folder.mkdir(exist_ok=True)
    for name in names:
        shutil.copy(SAMPLES / name, folder / name)
    return str(folder)


def _rows(df: DataFrame) -> list[tuple[Any, ...]]:
    """Whole rows, the commit time as epoch milliseconds, in one order."""
    out = df.withColumn("_commit_timestamp", F.unix_millis("_commit_timestamp"))
    return sorted(
        (tuple(r) for r in out.collect()), key=lambda r: [(v is not None, str(v)) for v in r]
    )


def _row(
    id: int, values: tuple[str, str, float], kind: str, version: int, ms: int
) -> tuple[Any, ...]:
    return (id, *values, kind, version, ms)


def _sorted(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=lambda r: [(v is not None, str(v)) for v in r])


SNAPSHOT_MS = [434, 435, 435, 436, 436, 436, 437, 437, 437]
POSTGRES_ROWS = [
    *[
        _row(101 + i, P[101 + i], "insert", 34078720, 1596001099000 + ms)
        for i, ms in enumerate(SNAPSHOT_MS)
    ],
    _row(106, P[106], PRE, 34131104, 1596010889629),
    _row(106, LATER[106], POST, 34131104, 1596010889629),
    _row(107, P[107], PRE, 34132200, 1596010930407),
    _row(107, LATER[107], POST, 34132200, 1596010930407),
    _row(110, P[110], "insert", 34132560, 1596010946488),
    _row(111, P[111], "insert", 34133072, 1596010976756),
    _row(110, P[110], PRE, 34133344, 1596010982228),
    _row(110, LATER[110], POST, 34133344, 1596010982228),
    _row(111, P[111], PRE, 34133584, 1596010985627),
    _row(111, LATER[111], POST, 34133584, 1596010985627),
    _row(111, LATER[111], "delete", 34133800, 1596010988168),
]


def _maxwell(xid: int, offset: int | None) -> int:
    return xid * XID + (XID - 1 if offset is None else offset)


MAXWELL_ROWS = [
    *[
        _row(101 + i, P[101 + i], "insert", _maxwell(7125, None if i == 8 else i), 1596684883000)
        for i in range(9)
    ],
    _row(106, P[106], PRE, _maxwell(7152, None), 1596684893000),
    _row(106, LATER[106], POST, _maxwell(7152, None), 1596684893000),
    _row(107, P[107], PRE, _maxwell(7169, None), 1596684897000),
    _row(107, LATER[107], POST, _maxwell(7169, None), 1596684897000),
    _row(110, P[110], "insert", _maxwell(7186, None), 1596684900000),
    _row(111, P[111], "insert", _maxwell(7201, None), 1596684904000),
    _row(110, P[110], PRE, _maxwell(7216, None), 1596684906000),
    _row(110, LATER[110], POST, _maxwell(7216, None), 1596684906000),
    _row(111, P[111], PRE, _maxwell(7235, None), 1596684912000),
    _row(111, LATER[111], POST, _maxwell(7235, None), 1596684912000),
    _row(111, LATER[111], "delete", _maxwell(7250, None), 1596684914000),
    _row(101, P[101], PRE, _maxwell(7291, 0), 1596684928000),
    _row(101, LATER[101], POST, _maxwell(7291, 0), 1596684928000),
    _row(102, P[102], PRE, _maxwell(7291, None), 1596684928000),
    _row(102, LATER[102], POST, _maxwell(7291, None), 1596684928000),
    _row(102, LATER[102], "delete", _maxwell(7322, 0), 1596684938000),
    _row(103, P[103], "delete", _maxwell(7322, None), 1596684938000),
]

CANAL_ROWS = [
    *[_row(101 + i, P[101 + i], "insert", 3 * CANAL + i, 1589373515000) for i in range(9)],
    _row(106, P[106], PRE, 4 * CANAL, 1589373546000),
    _row(106, LATER[106], POST, 4 * CANAL, 1589373546000),
    _row(107, P[107], PRE, 5 * CANAL, 1589373549000),
    _row(107, LATER[107], POST, 5 * CANAL, 1589373549000),
    _row(110, P[110], "insert", 6 * CANAL, 1589373552000),
    _row(111, P[111], "insert", 7 * CANAL, 1589373555000),
    _row(110, P[110], PRE, 8 * CANAL, 1589373558000),
    _row(110, LATER[110], POST, 8 * CANAL, 1589373558000),
    _row(111, P[111], PRE, 9 * CANAL, 1589373560000),
    _row(111, LATER[111], POST, 9 * CANAL, 1589373560000),
    _row(111, LATER[111], "delete", 10 * CANAL, 1589373563000),
    _row(101, P[101], PRE, 11 * CANAL, 1589373753000),
    _row(101, LATER[101], POST, 11 * CANAL, 1589373753000),
    _row(102, P[102], PRE, 11 * CANAL + 1, 1589373753000),
    _row(102, LATER[102], POST, 11 * CANAL + 1, 1589373753000),
    _row(102, LATER[102], "delete", 12 * CANAL, 1589374013000),
    _row(103, P[103], "delete", 12 * CANAL + 1, 1589374013000),
]

# GoldenGate's weights went through a float; its commit times are text, compared as such.
W = {
    101: 3.140000104904175,
    102: 8.100000381469727,
    103: 0.800000011920929,
    104: 0.75,
    105: 0.875,
    106: 1.0,
    107: 5.300000190734863,
    108: 0.10000000149011612,
    109: 22.200000762939453,
    110: 0.20000000298023224,
    111: 5.179999828338623,
}


def _ogg(id: int, weight: float, kind: str, pos: int, at: str, later: bool = False) -> tuple:
    name, description, _ = LATER[id] if later else P[id]
    return (id, name, description, weight, kind, pos, at)


OGG_ROWS = [
    _ogg(101, W[101], "insert", 143, "2020-05-13 15:40:06.000000"),
    *[_ogg(102 + i, W[102 + i], "insert", 144 + i, "2020-05-13 15:40:07.000000") for i in range(8)],
    _ogg(106, 1.0, PRE, 152, "2020-05-13 17:26:27.936000"),
    _ogg(106, 1.0, POST, 152, "2020-05-13 17:26:27.936000", later=True),
    _ogg(107, W[107], PRE, 153, "2020-05-13 17:28:19.505000"),
    _ogg(107, 5.099999904632568, POST, 153, "2020-05-13 17:28:19.505000", later=True),
    _ogg(110, W[110], "insert", 154, "2020-05-13 17:30:10.230000"),
    _ogg(111, W[111], "insert", 155, "2020-05-13 17:30:43.428000"),
    _ogg(110, W[110], PRE, 156, "2020-05-13 17:32:20.327000"),
    _ogg(110, 0.5, POST, 156, "2020-05-13 17:32:20.327000", later=True),
    _ogg(111, W[111], PRE, 157, "2020-05-13 17:32:10.904000"),
    _ogg(111, 5.170000076293945, POST, 157, "2020-05-13 17:32:10.904000", later=True),
    _ogg(111, 5.170000076293945, "delete", 158, "2020-05-13 17:32:24.455000", later=True),
]


@pytest.mark.parametrize(
    ("format", "name", "expected"),
    [
        ("debezium-json", "debezium-postgres-data-schema-exclude.txt", POSTGRES_ROWS),
        ("debezium-json", "debezium-postgres-data-schema-include.txt", POSTGRES_ROWS),
        ("maxwell-json", "maxwell-data.txt", MAXWELL_ROWS),
        ("canal-json", "canal-data.txt", CANAL_ROWS),
    ],
)
def test_flink_samples_decode_to_their_whole_history(
    spark: SparkSession, tmp_path: Path, format: str, name: str, expected: list[tuple[Any, ...]]
) -> None:
    feed = decode_changes(spark.read.text(_copy(tmp_path, name)), format, SCHEMA)
    assert feed.schema == OUTPUT
    assert _rows(feed) == _sorted(expected)


def test_goldengate_sample_decodes_to_its_whole_history(
    spark: SparkSession, tmp_path: Path
) -> None:
    feed = decode_changes(spark.read.text(_copy(tmp_path, "ogg-data.txt")), "ogg-json", SCHEMA)
    assert feed.schema == OUTPUT
    text = F.date_format("_commit_timestamp", "yyyy-MM-dd HH:mm:ss.SSSSSS")
    rows = feed.withColumn("_commit_timestamp", text).collect()
    assert _sorted([tuple(r) for r in rows]) == _sorted(OGG_ROWS)


def test_the_schema_wrapper_gives_the_schema_in_one_round_trip(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Left to the wrapper, the schema costs one read of one event (Debezium's int32 id is
    an int, its double weight a double; every column nullable, as a delete's are)."""
    events = spark.read.text(_copy(tmp_path, "debezium-postgres-data-schema-include.txt"))
    events.schema  # the text reader's own schema, read before counting  # noqa: B018
    with counting_rpcs(spark) as rpcs:
        feed = decode_changes(events, "debezium-json")
    assert rpcs.calls.count("ExecutePlan") == 1, rpcs.calls
    assert feed.schema == OUTPUT
    assert _rows(feed) == _sorted(POSTGRES_ROWS)


def test_building_the_plan_makes_no_round_trip(spark: SparkSession, tmp_path: Path) -> None:
    events = spark.read.text(_copy(tmp_path, "maxwell-data.txt"))
    with counting_rpcs(spark) as rpcs:
        for format in ("debezium-json", "maxwell-json", "canal-json", "ogg-json"):
            decode_changes(events, format, SCHEMA, options={"mode": "PERMISSIVE"})
    assert rpcs.calls == []


def test_replica_identity_without_before_images(spark: SparkSession, tmp_path: Path) -> None:
    """Updates under REPLICA IDENTITY DEFAULT carry no before image: post-images alone. The
    delete under NOTHING has neither image: a named error, or kept by PERMISSIVE with its
    text, or dropped by DROPMALFORMED."""
    events = spark.read.text(_copy(tmp_path, "debezium-postgres-data-replica-identity.txt"))
    good = [r for r in POSTGRES_ROWS if r[4] not in (PRE, "delete")]
    with pytest.raises(PySparkException) as caught:
        decode_changes(events, "debezium-json", SCHEMA).collect()
    assert caught.value.getCondition() == "INVALID_CDC_ENVELOPE.MALFORMED_EVENT"
    assert caught.value.getMessageParameters()["problem"].startswith(
        "is a delete without a before image"
    )
    dropped = decode_changes(events, "debezium-json", SCHEMA, options={"mode": "DROPMALFORMED"})
    assert _rows(dropped) == _sorted(good)
    kept = decode_changes(
        events,
        "debezium-json",
        SCHEMA,
        options={"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "bad"},
    )
    assert kept.schema == T.StructType([*OUTPUT.fields, T.StructField("bad", T.StringType())])
    last = (SAMPLES / "debezium-postgres-data-replica-identity.txt").read_text().splitlines()[-1]
    assert _rows(kept) == _sorted([(*r, None) for r in good] + [(None,) * 7 + (last,)])


def test_a_feed_applied_is_the_source_table(spark: SparkSession, tmp_path: Path) -> None:
    """Maxwell's history applied by _commit_version: the table as MySQL left it."""
    feed = decode_changes(
        spark.read.text(_copy(tmp_path, "maxwell-data.txt")), "maxwell-json", SCHEMA
    )
    target = str(tmp_path / "products")
    apply_changes(feed, target, keys=["id"], sequence_by="_commit_version")
    final = {**P, **LATER}
    for gone in (102, 103, 111):
        del final[gone]
    expected = [
        {"id": k, "name": v[0], "description": v[1], "weight": v[2]} for k, v in final.items()
    ]
    assert sorted_rows(read_table(target)) == sorted_rows_of(expected)


def sorted_rows_of(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: [(v is not None, str(v)) for v in r.values()])


def _debezium_mysql(op: str, before: Any, after: Any, pos: int, row: int = 0) -> str:
    source = {
        "connector": "mysql",
        "file": "mysql-bin.000007",
        "pos": pos,
        "row": row,
        "ts_ms": 1000 + pos,
    }
    return json.dumps({"before": before, "after": after, "op": op, "source": source, "ts_ms": 1})


def test_changes_of_one_key_in_one_transaction_keep_their_order(
    spark: SparkSession, tmp_path: Path
) -> None:
    """One MySQL transaction inserts key 1, updates it twice (two rows of one event among
    them) and deletes and re-inserts key 2: distinct versions in the log's order, so
    apply_changes applies them in order and refuses none as a duplicate sequence."""
    v = lambda i, x: {"id": i, "name": x, "description": None, "weight": None}  # noqa: E731
    events = [
        _debezium_mysql("c", None, v(2, "two"), 100),
        _debezium_mysql("c", None, v(1, "a"), 200),
        _debezium_mysql("u", v(1, "a"), v(1, "b"), 300, 0),
        _debezium_mysql("u", v(1, "b"), v(1, "c"), 300, 1),
        _debezium_mysql("d", v(2, "two"), None, 400),
        _debezium_mysql("c", None, v(2, "again"), 500),
        None,  # a Kafka tombstone
    ]
    frame = spark.createDataFrame([(e,) for e in events], "value string")
    feed = decode_changes(frame, "debezium-json", SCHEMA)
    versions = [
        r[0]
        for r in feed.where("_change_type != 'update_preimage'").select("_commit_version").collect()
    ]
    base = 7 << 40
    assert sorted(versions) == [
        base + 100,
        base + 200,
        base + 300,
        base + 301,
        base + 400,
        base + 500,
    ]
    target = str(tmp_path / "t")
    apply_changes(feed, target, keys=["id"], sequence_by="_commit_version")
    assert sorted_rows(read_table(target)) == sorted_rows_of([v(1, "c"), v(2, "again")])


def test_truncates_feed_apply_as_truncates(spark: SparkSession, tmp_path: Path) -> None:
    v = lambda i: {"id": i, "name": "x", "description": None, "weight": None}  # noqa: E731

    def pg(op: str, before: Any, after: Any, lsn: int) -> str:
        source = {"connector": "postgresql", "lsn": lsn, "ts_ms": lsn}
        return json.dumps({"before": before, "after": after, "op": op, "source": source})

    events = [
        pg("c", None, v(1), 10),
        pg("c", None, v(2), 20),
        pg("t", None, None, 30),
        pg("c", None, v(3), 40),
    ]
    feed = decode_changes(
        spark.createDataFrame([(e,) for e in events], "value string"), "debezium-json", SCHEMA
    )
    assert _rows(feed.where("_change_type = 'truncate'")) == [
        (None, None, None, None, "truncate", 30, 30)
    ]
    target = str(tmp_path / "t")
    apply_changes(
        feed,
        target,
        keys=["id"],
        sequence_by="_commit_version",
        apply_as_truncates="_change_type = 'truncate'",
    )
    assert sorted_rows(read_table(target)) == sorted_rows_of([v(3)])


def test_kafka_binary_values_and_parsed_structs(spark: SparkSession, tmp_path: Path) -> None:
    """Kafka's value is binary; a feed already parsed into a struct is taken as it is."""
    lines = (SAMPLES / "debezium-postgres-data-schema-exclude.txt").read_text().splitlines()
    binary = spark.createDataFrame([(bytearray(line, "utf-8"),) for line in lines], "value binary")
    assert _rows(decode_changes(binary, "debezium-json", SCHEMA)) == _sorted(POSTGRES_ROWS)
    text = spark.createDataFrame([(line,) for line in lines], "value string")
    image = "struct<id int, name string, description string, weight double>"
    envelope = (
        f"before {image}, after {image}, op string, "
        "source struct<connector string, lsn long, ts_ms long>"
    )
    parsed = text.select(F.from_json("value", envelope).alias("event"))
    feed = decode_changes(parsed, "debezium-json", SCHEMA, column="event", parsed=True)
    assert _rows(feed) == _sorted(POSTGRES_ROWS)


def test_a_stream_decodes_what_a_batch_does(
    spark: SparkSession, tmp_path: Path, query_name: str
) -> None:
    folder = _copy(tmp_path, "canal-data.txt")
    stream = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(folder)
    out = run_stream(decode_changes(stream, "canal-json", SCHEMA), query_name)
    assert _rows(out) == _sorted(CANAL_ROWS)


@pytest.mark.parametrize(
    ("format", "event", "condition", "problem"),
    [
        (
            "debezium-json",
            "{not json",
            "MALFORMED_EVENT",
            "is not JSON, or a value in it does not fit the schema",
        ),
        (
            "debezium-json",
            '{"op":"x","after":{"id":1}}',
            "MALFORMED_EVENT",
            "has operation 'x', not one of c, r, u, d, t",
        ),
        (
            "debezium-json",
            '{"op":"c","after":{"id":"abc"}}',
            "MALFORMED_EVENT",
            "is not JSON, or a value in it does not fit the schema",
        ),
        (
            "debezium-json",
            '{"op":"u","before":{"id":1},"source":{"connector":"postgresql","lsn":1,"ts_ms":1}}',
            "MALFORMED_EVENT",
            "has no after image",
        ),
        (
            "debezium-json",
            '{"op":"c","after":{"id":1},"source":{"connector":"oracle","ts_ms":1}}',
            "NO_POSITION",
            "connector oracle has no position read here",
        ),
        (
            "debezium-json",
            '{"op":"c","after":{"id":1},"source":{"connector":"mysql","file":"b.000001","ts_ms":1}}',
            "NO_POSITION",
            "source.file or source.pos is missing",
        ),
        (
            "maxwell-json",
            '{"type":"insert","ts":1,"xid":5,"data":{"id":1}}',
            "NO_POSITION",
            "xoffset is missing on a row that does not end its commit",
        ),
        (
            "maxwell-json",
            '{"type":"update","ts":1,"xid":5,"commit":true,"data":{"id":1},"old":{"weight":"heavy"}}',
            "MALFORMED_EVENT",
            "has an old value that does not fit the schema",
        ),
        (
            "maxwell-json",
            '{"type":"insert","ts":1,"commit":true,"data":{"id":1}}',
            "NO_POSITION",
            "xid is missing",
        ),
        (
            "canal-json",
            '{"type":"INSERT","es":1,"id":1,"isDdl":false,"data":[{"id":"one"}]}',
            "MALFORMED_EVENT",
            "has a value that does not fit the schema",
        ),
        (
            "canal-json",
            '{"type":"QUERY","es":1,"id":1,"isDdl":false,"data":[{"id":"1"}]}',
            "MALFORMED_EVENT",
            "has operation 'QUERY', not one of INSERT, UPDATE, DELETE",
        ),
        (
            "ogg-json",
            '{"op_type":"D","pos":"1","op_ts":"2020-01-01 00:00:00"}',
            "MALFORMED_EVENT",
            "is a delete without a before image",
        ),
        (
            "ogg-json",
            '{"op_type":"I","pos":"x1","op_ts":"2020-01-01 00:00:00","after":{"id":1}}',
            "NO_POSITION",
            "pos is missing or not a number",
        ),
        (
            "ogg-json",
            '{"op_type":"I","pos":"1","after":{"id":1}}',
            "MALFORMED_EVENT",
            "has no commit time",
        ),
    ],
)
def test_each_bad_event_fails_by_name(
    spark: SparkSession, format: str, event: str, condition: str, problem: str
) -> None:
    frame = spark.createDataFrame([(event,)], "value string")
    with pytest.raises(PySparkException) as caught:
        decode_changes(frame, format, SCHEMA).collect()
    assert caught.value.getCondition() == f"INVALID_CDC_ENVELOPE.{condition}"
    assert caught.value.getMessageParameters() == {
        "format": format,
        "problem": problem,
        "event": event,
    }
    kept = decode_changes(frame, format, SCHEMA, options={"mode": "PERMISSIVE"}).collect()
    assert [tuple(r) for r in kept] == [(None,) * 7 + (event,)]
    assert decode_changes(frame, format, SCHEMA, options={"mode": "DROPMALFORMED"}).collect() == []


def test_ddl_and_bootstrap_markers_are_skipped(spark: SparkSession) -> None:
    events = [
        '{"type":"table-create","database":"d","table":"t","ts":1,"xid":3,"def":{"columns":[]}}',
        '{"type":"bootstrap-start","database":"d","table":"t","ts":1,"data":{}}',
        '{"type":"insert","ts":2,"xid":9,"commit":true,"data":{"id":1,"name":"a"}}',
    ]
    frame = spark.createDataFrame([(e,) for e in events], "value string")
    rows = _rows(decode_changes(frame, "maxwell-json", SCHEMA))
    assert rows == [(1, "a", None, None, "insert", 9 * XID + XID - 1, 2000)]


_DDL = "ALTER TABLE t ADD c INT"
_WITH_DDL = {
    "debezium-json": [
        '{"source":{"connector":"mysql","file":"mysql-bin.000003","pos":154,"ts_ms":1000},'
        f'"ts_ms":1000,"databaseName":"d","ddl":"{_DDL}"}}',
        '{"op":"c","after":{"id":1,"name":"a"},"source":{"connector":"mysql",'
        '"file":"mysql-bin.000003","pos":300,"row":0,"ts_ms":2000},"ts_ms":2000}',
    ],
    "maxwell-json": [
        f'{{"type":"table-alter","database":"d","table":"t","ts":1,"sql":"{_DDL}","def":{{}}}}',
        '{"type":"insert","ts":2,"xid":9,"commit":true,"data":{"id":1,"name":"a"}}',
    ],
    "canal-json": [
        f'{{"type":"ALTER","isDdl":true,"es":1000,"id":7,"sql":"{_DDL}","data":null}}',
        '{"type":"INSERT","isDdl":false,"es":2000,"id":8,"data":[{"id":"1","name":"a"}]}',
    ],
}


@pytest.mark.parametrize("format", sorted(_WITH_DDL))
def test_ddl_events_are_left_out_or_rows_on_request(spark: SparkSession, format: str) -> None:
    """A schema change (Debezium's schema change event, Maxwell's table-alter, Canal's isDdl
    message) is left out by default; with includeDdl=true it is a row of _change_type ddl,
    NULL columns, its statement in _ddl, before the later insert; the other rows read as
    without it, _ddl NULL."""
    ddl, insert = (spark.createDataFrame([(e,)], "value string") for e in _WITH_DDL[format])
    both = ddl.union(insert)
    alone = decode_changes(insert, format, SCHEMA)
    assert _rows(decode_changes(both, format, SCHEMA)) == _rows(alone)
    shown = decode_changes(both, format, SCHEMA, options={"includeDdl": "true"})
    assert shown.schema == T.StructType(
        [*alone.schema.fields, T.StructField("_ddl", T.StringType())]
    )
    rows = _rows(shown)
    change = [r for r in rows if r[-4] == "ddl"]
    assert [r for r in rows if r[-4] != "ddl"] == [(*r, None) for r in _rows(alone)]
    assert len(change) == 1 and change[0][: len(SCHEMA.fields)] == (None,) * len(SCHEMA.fields)
    assert change[0][-1] == _DDL
    version, inserted = change[0][-3], _rows(alone)[0][-2]
    assert version is None or version < inserted


def test_a_version_column_orders_envelopes_without_a_position(spark: SparkSession) -> None:
    frame = spark.createDataFrame(
        [('{"op":"c","after":{"id":1},"source":{"connector":"sqlserver","ts_ms":5}}', 42)],
        "value string, offset long",
    )
    assert _rows(decode_changes(frame, "debezium-json", SCHEMA, version="offset")) == [
        (1, None, None, None, "insert", 42, 5)
    ]


@pytest.mark.parametrize(
    ("call", "condition"),
    [
        (lambda df: decode_changes(df, "debezium"), "INVALID_CDC_OPTION.UNKNOWN_FORMAT"),
        (lambda df: decode_changes(df, "maxwell-json"), "INVALID_CDC_ENVELOPE.SCHEMA_REQUIRED"),
        (
            lambda df: decode_changes(df, schema=SCHEMA, options={"modes": "x"}),
            "INVALID_CDC_OPTION.UNKNOWN_OPTION",
        ),
        (
            lambda df: decode_changes(df, schema=SCHEMA, options={"mode": "lenient"}),
            "INVALID_CDC_ENVELOPE.INVALID_PARAMETER",
        ),
        (
            lambda df: decode_changes(df, schema=T.StructType([])),
            "INVALID_CDC_ENVELOPE.INVALID_PARAMETER",
        ),
        (
            lambda df: decode_changes(df, schema=SCHEMA, column=3),
            "INVALID_CDC_ENVELOPE.INVALID_PARAMETER",
        ),
    ],
)
def test_bad_parameters_are_refused_before_any_round_trip(
    spark: SparkSession, call: Any, condition: str
) -> None:
    frame = spark.createDataFrame([("{}",)], "value string")
    with counting_rpcs(spark) as rpcs, pytest.raises(PySparkException) as caught:
        call(frame)
    assert caught.value.getCondition() == condition
    assert rpcs.calls == []


def test_a_wrapper_without_a_spark_type_and_a_stream_without_a_schema(
    spark: SparkSession, tmp_path: Path
) -> None:
    decimal = {
        "schema": {
            "type": "struct",
            "fields": [
                {
                    "type": "struct",
                    "field": "after",
                    "fields": [
                        {
                            "type": "bytes",
                            "name": "org.apache.kafka.connect.data.Decimal",
                            "field": "price",
                        }
                    ],
                }
            ],
        },
        "payload": {"op": "c", "after": {"price": "AQ=="}},
    }
    frame = spark.createDataFrame([(json.dumps(decimal),)], "value string")
    with pytest.raises(PySparkException) as caught:
        decode_changes(frame, "debezium-json")
    assert caught.value.getCondition() == "INVALID_CDC_ENVELOPE.UNSUPPORTED_SCHEMA_TYPE"
    assert caught.value.getMessageParameters() == {
        "column": "price",
        "type": "org.apache.kafka.connect.data.Decimal",
    }
    stream = spark.readStream.format("text").load(_copy(tmp_path, "maxwell-data.txt"))
    with pytest.raises(PySparkException) as caught:
        decode_changes(stream, "debezium-json")
    assert caught.value.getCondition() == "INVALID_CDC_ENVELOPE.SCHEMA_REQUIRED"


def test_a_stream_stopped_and_restarted_applies_what_one_batch_does(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Canal's messages land as files one to three at a time; a stream of them into
    apply_changes is stopped after each landing and started again from its checkpoint: the
    target is the one batch read of all of them makes."""
    lines = (SAMPLES / "canal-data.txt").read_text().splitlines()
    folder = tmp_path / "topic"
    folder.mkdir()
    stream_target, batch_target = str(tmp_path / "streamed"), str(tmp_path / "batch")
    landed = 0
    for size in (3, 1, 2, 3, 2):
        for line in lines[landed : landed + size]:
            landed += 1
            (folder / f"message-{landed:02d}.json").write_text(line + "\n")
        events = spark.readStream.format("text").option("maxFilesPerTrigger", 2).load(str(folder))
        query = apply_changes(
            decode_changes(events, "canal-json", SCHEMA),
            stream_target,
            keys=["id"],
            sequence_by="_commit_version",
            checkpoint_location=str(tmp_path / "checkpoint"),
            trigger={"availableNow": True},
        )
        query.awaitTermination(300)  # type: ignore[union-attr]
        assert query.exception() is None  # type: ignore[union-attr]
    assert landed == len(lines)
    everything = decode_changes(spark.read.text(str(folder)), "canal-json", SCHEMA)
    apply_changes(everything, batch_target, keys=["id"], sequence_by="_commit_version")
    assert sorted_rows(read_table(stream_target)) == sorted_rows(read_table(batch_target))
    final = {k: v for k, v in {**P, **LATER}.items() if k not in (102, 103, 111)}
    assert sorted_rows(read_table(batch_target)) == sorted_rows_of(
        [{"id": k, "name": v[0], "description": v[1], "weight": v[2]} for k, v in final.items()]
    )


def test_a_ddl_schema_and_a_feed_without_the_wrapper(spark: SparkSession, tmp_path: Path) -> None:
    """A DDL string is the same schema (Spark parses it: one round trip); a Debezium feed
    without the schema wrapper and without schema= is refused by name, saying why."""
    events = spark.read.text(_copy(tmp_path, "debezium-postgres-data-schema-exclude.txt"))
    ddl = "id INT, name STRING, description STRING, weight DOUBLE"
    feed = decode_changes(events, "debezium-json", ddl)
    assert feed.schema == OUTPUT
    assert _rows(feed) == _sorted(POSTGRES_ROWS)
    with pytest.raises(PySparkException) as caught:
        decode_changes(events, "debezium-json")
    assert caught.value.getCondition() == "INVALID_CDC_ENVELOPE.SCHEMA_REQUIRED"
    assert "schemas.enable=false" in caught.value.getMessageParameters()["why"]
    for bad, condition in (
        ("int", "INVALID_CDC_ENVELOPE.INVALID_PARAMETER"),  # a type, not a list of columns
        ("id INT,", "PARSE_SYNTAX_ERROR"),  # Spark's own parser refuses it
    ):
        with pytest.raises(PySparkException) as caught:
            decode_changes(events, "debezium-json", bad)
        assert caught.value.getCondition() == condition


def test_a_history_keeps_each_change_of_one_transaction(
    spark: SparkSession, tmp_path: Path
) -> None:
    """SCD type 2 by _commit_version: a row changed twice in one transaction has a history
    version for each change, the first ending where the second starts (the docs say so)."""
    v = lambda x: {"id": 1, "name": x, "description": None, "weight": None}  # noqa: E731
    events = [
        _debezium_mysql("c", None, v("a"), 100),
        _debezium_mysql("u", v("a"), v("b"), 200),
        _debezium_mysql("u", v("b"), v("c"), 200, 1),
    ]
    feed = decode_changes(
        spark.createDataFrame([(e,) for e in events], "value string"), "debezium-json", SCHEMA
    )
    target = str(tmp_path / "history")
    apply_changes(feed, target, keys=["id"], sequence_by="_commit_version", stored_as_scd_type=2)
    base = 7 << 40
    got = sorted(
        ((r["name"], r["__START_AT"], r["__END_AT"]) for r in read_table(target).to_pylist()),
        key=lambda r: r[1],
    )
    assert got == [
        ("a", base + 100, base + 200),
        ("b", base + 200, base + 201),
        ("c", base + 201, None),
    ]


def test_canal_types_give_the_schema_in_one_round_trip(spark: SparkSession, tmp_path: Path) -> None:
    """Left without schema=, Canal's first message with types gives the columns (its
    INTEGER an int, its FLOAT a float), read once; the rows are the same as with that
    schema given."""
    events = spark.read.text(_copy(tmp_path, "canal-data.txt"))
    events.schema  # the text reader's own schema, read before counting  # noqa: B018
    with counting_rpcs(spark) as rpcs:
        feed = decode_changes(events, "canal-json")
    assert rpcs.calls.count("ExecutePlan") == 1, rpcs.calls
    typed = T.StructType(
        [
            T.StructField("id", T.IntegerType()),
            T.StructField("name", T.StringType()),
            T.StructField("description", T.StringType()),
            T.StructField("weight", T.FloatType()),
        ]
    )
    assert feed.schema == T.StructType([*typed.fields, *OUTPUT.fields[4:]])
    assert _rows(feed) == _rows(decode_changes(events, "canal-json", typed))
    assert len(_rows(feed)) == len(CANAL_ROWS)
