"""The postgres source's rules without a database: pgoutput messages (written here as
PostgreSQL's documentation lays them out) decoded and folded into changelog rows, checked
against a row-by-row model; commit times made to rise; which transactions a first copy's
snapshot saw, across xid wraparound. The same rules against a real PostgreSQL:
tests/server/test_postgres_source.py."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import IntegerType, StringType, StructField, StructType
from spark_cdc.server_plugin.arrow_types import arrow_schema
from spark_cdc.server_plugin.changefeed.changelog_schema import changelog_schema
from spark_cdc.server_plugin.errors import ChangelogSourceError
from spark_cdc.server_plugin.postgres import pgoutput
from spark_cdc.server_plugin.postgres.catalog import TableInfo
from spark_cdc.server_plugin.postgres.changes import changelog, monotonic_us, served
from spark_cdc.server_plugin.postgres.pgoutput import decode
from spark_cdc.server_plugin.postgres.visibility import Visibility

SCHEMA = StructType([StructField("id", IntegerType()), StructField("v", StringType())])
INFO = TableInfo("public.t", SCHEMA, ("id",), "d", 0)


def _tuple(values: list[Any]) -> bytes:
    out = struct.pack(">H", len(values))
    for value in values:
        if value is None:
            out += b"n"
        else:
            text = str(value).encode()
            out += b"t" + struct.pack(">I", len(text)) + text
    return out


def _relation(full: bool) -> bytes:
    columns = b"".join(
        struct.pack(">B", 1 if name == "id" or full else 0)
        + name.encode()
        + b"\0"
        + struct.pack(">Ii", oid, -1)
        for name, oid in (("id", 23), ("v", 25))
    )
    return (
        b"R"
        + struct.pack(">I", 16384)
        + b"public\0t\0"
        + (b"f" if full else b"d")
        + struct.pack(">H", 2)
        + columns
    )


Op = tuple[str, int, str | None]  # kind, key, value


def _messages(transactions: list[list[Op]], full: bool, rows: dict[int, str]) -> list[bytes]:
    """The log of ``transactions`` applied to ``rows`` (changed in place), as pgoutput
    writes it: updates of an existing key, deletes of one, inserts of a new one."""
    out = []
    for number, changes in enumerate(transactions, start=1):
        lsn, at = number * 1000, number * 10
        out.append(b"B" + struct.pack(">qqI", lsn, at, 700 + number))
        out.append(_relation(full))
        for kind, key, value in changes:
            if kind == "T":
                out.append(b"T" + struct.pack(">IBI", 1, 0, 16384))
                rows.clear()
                continue
            if kind == "I":
                out.append(b"I" + struct.pack(">I", 16384) + b"N" + _tuple([key, value]))
            elif kind == "U":
                old = b"O" + _tuple([key, rows[key]]) if full else b""
                out.append(b"U" + struct.pack(">I", 16384) + old + b"N" + _tuple([key, value]))
            else:
                old = _tuple([key, rows[key] if full else None])
                out.append(b"D" + struct.pack(">I", 16384) + (b"O" if full else b"K") + old)
            if kind == "D":
                del rows[key]
            else:
                rows[key] = value  # type: ignore[assignment]
        out.append(b"C" + struct.pack(">Bqqq", 0, lsn, lsn + 50, at))
    return out


@st.composite
def _histories(draw: Any, truncates: bool = False) -> list[list[Op]]:
    keys: set[int] = set()
    transactions = []
    for _ in range(draw(st.integers(1, 5))):
        changes: list[Op] = []
        for _ in range(draw(st.integers(1, 6))):
            if truncates and draw(st.integers(0, 5)) == 0:
                changes.append(("T", 0, None))
                keys.clear()
                continue
            key = draw(st.integers(0, 4))
            value = draw(
                st.sampled_from(
                    ["a", "b", "c", None, "twelve bytes", "more than twelve bytes", "é" * 7]
                )
            )
            kind = draw(st.sampled_from("UD")) if key in keys else "I"
            changes.append((kind, key, value))
            if kind == "D":
                keys.discard(key)
            else:
                keys.add(key)
        transactions.append(changes)
    return transactions


def _model(transactions: list[list[Op]], full: bool) -> list[tuple[Any, ...]]:
    """Row by row: each transaction's net change per key, as Spark's changelog rows."""
    rows: dict[int, str | None] = {}
    out: list[tuple[Any, ...]] = []
    for number, changes in enumerate(transactions, start=1):
        cut = max((i for i, (kind, _, _) in enumerate(changes) if kind == "T"), default=None)
        if cut is not None:  # what the transaction wrote before its last truncate is gone
            out.append((None, None, "truncate", number * 1000 - 1))
            rows.clear()
            changes = changes[cut + 1 :]
        before = dict(rows)
        for kind, key, value in changes:
            if kind == "D":
                del rows[key]
            else:
                rows[key] = value
        for key in sorted({key for _, key, _ in changes}):
            was, now = key in before, key in rows
            if not was and now:
                out.append((key, rows[key], "insert", number * 1000))
            elif was and not now:
                image = before[key] if full else None
                out.append((key, image, "delete", number * 1000))
            elif was and now:
                if full:  # the log has the whole old row only under REPLICA IDENTITY FULL
                    out.append((key, before[key], "update_preimage", number * 1000))
                out.append((key, rows[key], "update_postimage", number * 1000))
    return sorted(out, key=repr)


@settings(max_examples=150, deadline=None)
@given(_histories(truncates=True), st.booleans())
def test_each_transaction_folds_to_its_net_change_per_key(
    transactions: list[list[Op]], full: bool
) -> None:
    """Truncates served as rows (includeTruncates): a truncate row one version before its
    transaction's, the transaction's changes after it, none from before it; versions rise."""
    data = pa.array(_messages(transactions, full, {}), pa.binary())
    decoded = decode(data)
    chosen = served(decoded, -1, None, np.zeros(len(decoded.xid), bool), None)
    table = changelog(decoded, INFO, chosen, arrow_schema(changelog_schema(SCHEMA)), True)
    got = sorted(
        ((r["id"], r["v"], r["_change_type"], r["_commit_version"]) for r in table.to_pylist()),
        key=repr,
    )
    assert got == _model(transactions, full)
    assert table.schema == arrow_schema(changelog_schema(SCHEMA))
    versions = table.column("_commit_version").to_pylist()
    assert versions == sorted(versions)


@given(_histories(truncates=True))
def test_a_truncate_is_refused_by_name_unless_asked_for(transactions: list[list[Op]]) -> None:
    decoded = decode(pa.array(_messages(transactions, False, {}), pa.binary()))
    chosen = served(decoded, -1, None, np.zeros(len(decoded.xid), bool), None)
    truncated = any(kind == "T" for changes in transactions for kind, _, _ in changes)
    try:
        changelog(decoded, INFO, chosen, arrow_schema(changelog_schema(SCHEMA)))
    except ChangelogSourceError as refused:
        assert truncated and refused.condition == "POSTGRES_CHANGELOG.TRUNCATE"
    else:
        assert not truncated


@given(st.lists(st.integers(0, 10**7), max_size=30), st.none() | st.integers(0, 10**7))
def test_commit_times_rise_by_a_millisecond_at_least_and_keep_later_ones(
    recorded: list[int], previous: int | None
) -> None:
    times = monotonic_us(np.array(recorded, dtype=np.int64), previous)
    last = previous
    for value, out in zip(recorded, times, strict=True):
        want = value if last is None else max(value, last + 1000)
        assert out == want
        last = want


@given(st.integers(3, 2**40), st.data())
def test_a_snapshot_saw_what_committed_before_it_across_wraparound(
    xmax: int, data: st.DataObject
) -> None:
    xmin = data.draw(st.integers(max(3, xmax - 1000), xmax))
    running = tuple(
        data.draw(st.lists(st.integers(xmin, xmax - 1), max_size=5, unique=True))
        if xmax > xmin
        else ()
    )
    xids64 = data.draw(st.lists(st.integers(max(3, xmax - 2000), xmax + 2000), min_size=1))
    seen = Visibility(xmin, xmax, running).saw(np.array([x & 0xFFFFFFFF for x in xids64]))
    want = [x < xmin or (x < xmax and x not in running) for x in xids64]
    assert seen.tolist() == want
    assert Visibility.parse(str(Visibility(xmin, xmax, running))) == Visibility(xmin, xmax, running)


@settings(max_examples=50, deadline=None)
@given(_histories(truncates=True), st.booleans())
def test_values_decode_the_same_without_string_views(
    transactions: list[list[Op]], full: bool
) -> None:
    """pyarrow before 16 has no string views: the byte gather it falls back to gives the
    same rows."""
    data = pa.array(_messages(transactions, full, {}), pa.binary())
    schema = arrow_schema(changelog_schema(SCHEMA))

    def rows() -> pa.Table:
        decoded = decode(data)
        chosen = served(decoded, -1, None, np.zeros(len(decoded.xid), bool), None)
        return changelog(decoded, INFO, chosen, schema, True)

    with_views = rows()
    pgoutput._HAS_VIEWS = False
    try:
        assert rows().equals(with_views)
    finally:
        pgoutput._HAS_VIEWS = True
