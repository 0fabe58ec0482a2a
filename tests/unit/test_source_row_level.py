"""The source's row-level passes (``server_plugin.row_level``) on Arrow data, without a server,
against a plain-Python model of the client's equality rules.

The client's plans compare rows through Spark's ``to_json`` images and group row ids as
Spark groups keys; the model spells both out: maps in entry order, ``-0.0`` unlike ``0.0``
in images but like it in keys, every NaN alike, NULLs alike.
"""

from __future__ import annotations

import math
import struct
import subprocess
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spark_cdc.server_plugin.errors import ChangelogSourceError
from spark_cdc.server_plugin.row_level import hashing
from spark_cdc.server_plugin.row_level.rules import (
    LINEAGE_COLUMNS,
    RowLevelRules,
    buckets_of,
    change_kinds,
    group_rows,
    labels,
    resolve,
)

META = ("_change_type", "_commit_version", "_commit_timestamp")
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("key", pa.struct([pa.field("k", pa.string()), pa.field("f", pa.float64())])),
        pa.field("d", pa.float64()),
        pa.field("s", pa.string()),
        pa.field("m", pa.map_(pa.string(), pa.int32())),
        pa.field("l", pa.list_(pa.float32())),
        pa.field("b", pa.binary()),
        pa.field("t", pa.timestamp("us", tz="UTC")),
        pa.field("n", pa.struct([pa.field("x", pa.int16()), pa.field("y", pa.list_(pa.string()))])),
        pa.field("_change_type", pa.string(), False),
        pa.field("_commit_version", pa.int64(), False),
        pa.field("_commit_timestamp", pa.timestamp("us", tz="UTC"), False),
    ]
)
DATA = [f.name for f in SCHEMA if f.name not in META]

FLOATS = st.sampled_from([0.0, -0.0, math.nan, 1.5, None])
SHORT_VALUES = ["", "a", "ab", None]
SHORT = st.sampled_from(SHORT_VALUES)
VALUES = {
    "id": st.sampled_from([1, 2, None]),
    "key": st.one_of(st.none(), st.fixed_dictionaries({"k": SHORT, "f": FLOATS})),
    "d": FLOATS,
    "s": SHORT,
    "m": st.sampled_from([None, [], [("a", 1)], [("a", 1), ("b", 2)], [("b", 2), ("a", 1)]]),
    "l": st.one_of(st.none(), st.lists(st.sampled_from([0.0, -0.0, math.nan, None]), max_size=2)),
    "b": st.sampled_from([None, b"", b"\x00", b"\x00\x01"]),
    "t": st.sampled_from([None, datetime(2024, 1, 1, tzinfo=timezone.utc), datetime(1, 1, 1)]),
    "n": st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {"x": st.sampled_from([None, 1]), "y": st.sampled_from([None, [], ["a"], [None]])}
        ),
    ),
}


@st.composite
def commits(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Rows of one to three commits; pairs often copy one image so carry-overs happen."""
    rows: list[dict[str, Any]] = []
    for version in range(1, draw(st.integers(1, 3)) + 1):
        for _ in range(draw(st.integers(0, 6))):
            image = {name: draw(strategy) for name, strategy in VALUES.items()}
            kinds = draw(
                st.sampled_from([["insert"], ["delete"], ["delete", "insert"], ["update_preimage"]])
            )
            for kind in kinds:
                changed = draw(st.sampled_from([image, image, {**image, "d": draw(FLOATS)}]))
                rows.append({**changed, "_change_type": kind, "_commit_version": version})
    return rows


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    stamp = datetime(2024, 1, 1, tzinfo=timezone.utc)
    full = [{**r, "_commit_timestamp": stamp} for r in rows]
    return pa.Table.from_pylist(full, schema=SCHEMA)


# ---- the model ---------------------------------------------------------------------------


def _canon(value: Any, key: bool) -> Any:
    """A hashable stand-in equal exactly when the client's rule calls two values equal."""
    if value is None:
        return ("null",)
    if isinstance(value, float):
        if math.isnan(value):
            return ("nan",)
        if key and value == 0.0:
            value = 0.0
        return ("float", struct.pack(">d", value))
    if isinstance(value, dict):
        return ("struct", tuple((k, _canon(v, key)) for k, v in sorted(value.items())))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(_canon(v, key) for v in value))
    return ("value", type(value).__name__, value)


def _model(
    rows: list[dict[str, Any]], row_id: list[str] | None, carryovers: bool, updates: bool
) -> list[dict[str, Any]]:
    groups: dict[Any, list[int]] = defaultdict(list)
    for index, r in enumerate(rows):
        names = row_id if row_id is not None else DATA
        groups[(_canon([r[c] for c in names], row_id is not None), r["_commit_version"])].append(
            index
        )
    dropped, relabelled = set(), {}
    for members in groups.values():
        kinds = [rows[i]["_change_type"] for i in members]
        deletes, inserts = kinds.count("delete"), kinds.count("insert")
        if updates and (deletes > 1 or inserts > 1):
            raise ValueError("UNEXPECTED_MULTIPLE_CHANGES_PER_ROW_VERSION")
        pair = deletes == 1 and inserts == 1
        images = {_canon([rows[i][c] for c in DATA], False) for i in members}
        if carryovers and pair and len(images) == 1:
            dropped.update(members)
        elif updates and pair:
            for i in members:
                label = {"delete": "update_preimage", "insert": "update_postimage"}
                relabelled[i] = label.get(rows[i]["_change_type"], rows[i]["_change_type"])
    return [
        {**r, "_change_type": relabelled.get(i, r["_change_type"])}
        for i, r in enumerate(rows)
        if i not in dropped
    ]


def _out(table: pa.Table) -> list[Any]:
    rows = table.drop_columns(["_commit_timestamp"]).to_pylist()
    return [_canon(list(r.values()), False) for r in rows]


def _expected(rows: list[dict[str, Any]]) -> list[Any]:
    # to_pylist turns maps into lists of pairs: the model's rows go through Arrow too.
    return _out(_table(rows))


RULES = [
    (["id"], True, False),
    (["id"], True, True),
    (["key"], True, True),
    (["key.f", "id"], True, True),
    (None, True, False),
]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=commits(), rules=st.sampled_from(RULES))
def test_resolve_matches_the_model(rows: list[dict[str, Any]], rules: tuple) -> None:
    row_id, carryovers, updates = rules
    paths = None if row_id is None else tuple(tuple(c.split(".")) for c in row_id)
    flat_rows = [{**r, "key.f": (r["key"] or {}).get("f")} for r in rows]
    try:
        expected = _model(flat_rows, row_id, carryovers, updates)
    except ValueError:
        with pytest.raises(ChangelogSourceError, match="UNEXPECTED_MULTIPLE_CHANGES"):
            resolve(_table(rows), RowLevelRules(paths, carryovers, updates))
        return
    got = resolve(_table(rows), RowLevelRules(paths, carryovers, updates))
    assert got.schema == SCHEMA
    expected_rows = [{k: v for k, v in r.items() if k != "key.f"} for r in expected]
    assert _out(got) == _expected(expected_rows)


def _as_read(table: pa.Table) -> pa.Table:
    """A commit as the source reads it to resolve: change types as codes, no version or
    timestamp columns."""
    codes = pa.array(change_kinds(table.column("_change_type")), pa.int8())
    data = table.drop_columns(["_change_type", "_commit_version", "_commit_timestamp"])
    return data.append_column("_change_type", codes)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=commits(), rules=st.sampled_from(RULES))
def test_a_commit_read_with_codes_resolves_as_with_labels(
    rows: list[dict[str, Any]], rules: tuple
) -> None:
    row_id, carryovers, updates = rules
    paths = None if row_id is None else tuple(tuple(c.split(".")) for c in row_id)
    given_rules = RowLevelRules(paths, carryovers, updates)
    for version in sorted({r["_commit_version"] for r in rows}):
        table = _table([r for r in rows if r["_commit_version"] == version])
        try:
            expected = resolve(table, given_rules)
        except ChangelogSourceError as error:
            with pytest.raises(ChangelogSourceError) as caught:
                resolve(_as_read(table), given_rules, version)
            assert (caught.value.condition, caught.value.parameters) == (
                error.condition,
                error.parameters,
            )
            continue
        got = resolve(_as_read(table), given_rules, version)
        assert got.column("_change_type").type == pa.int8()
        data = [_canon(list(r.values()), False) for r in got.to_pylist()]  # NaN equals NaN
        assert data == [_canon(list(r.values()), False) for r in _as_read(expected).to_pylist()]
        assert got.schema == _as_read(expected).schema
        assert labels(got.column("_change_type")).to_pylist() == (
            expected.column("_change_type").to_pylist()
        )


def test_equality_rules_one_by_one() -> None:
    """Pairs that are carry-overs (dropped) and pairs that are not (kept as an update)."""
    base = {c: None for c in DATA} | {"id": 1}
    cases = [
        ({"d": math.nan}, {"d": float("nan")}, True),  # every NaN equals every NaN
        ({"d": 0.0}, {"d": -0.0}, False),  # the image keeps the sign of zero
        ({"m": [("a", 1), ("b", 2)]}, {"m": [("b", 2), ("a", 1)]}, False),  # entry order
        ({"m": []}, {"m": None}, False),
        ({"l": [None]}, {"l": []}, False),
        ({"b": b""}, {"b": None}, False),
        ({"n": {"x": None, "y": None}}, {"n": None}, False),  # a NULL struct is not {x: null}
        ({"n": {"x": 1, "y": ["a"]}}, {"n": {"x": 1, "y": ["a"]}}, True),
        ({"t": datetime(2024, 1, 1, 0, 0, 0, 1, timezone.utc)}, {"t": datetime(2024, 1, 1)}, False),
    ]
    for before, after, carryover in cases:
        rows = [
            {**base, **before, "_change_type": "delete", "_commit_version": 1},
            {**base, **after, "_change_type": "insert", "_commit_version": 1},
        ]
        got = resolve(_table(rows), RowLevelRules((("id",),), True, True))
        kinds = got.column("_change_type").to_pylist()
        assert kinds == ([] if carryover else ["update_preimage", "update_postimage"]), before


def test_keys_group_as_spark_groups_them() -> None:
    """-0.0 and 0.0 (and any two NaNs) are one row id; NULL ids form one group."""
    rows = [
        {**{c: None for c in DATA}, "key": {"k": "a", "f": -0.0}, "_change_type": "delete"},
        {**{c: None for c in DATA}, "key": {"k": "a", "f": 0.0}, "_change_type": "insert"},
        {**{c: None for c in DATA}, "key": {"k": "b", "f": math.nan}, "_change_type": "delete"},
        {**{c: None for c in DATA}, "key": {"k": "b", "f": -math.nan}, "_change_type": "insert"},
    ]
    rows = [{**r, "_commit_version": 3, "d": i} for i, r in enumerate(map(dict, rows))]
    got = resolve(_table(rows), RowLevelRules((("key",),), True, True))
    assert got.column("_change_type").to_pylist() == [
        "update_preimage",
        "update_postimage",
        "update_preimage",
        "update_postimage",
    ]


def test_hash_collisions_never_merge_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row hashing alike: the value-by-value check still separates the groups."""
    monkeypatch.setattr(
        hashing, "column_hash", lambda column, mode: np.zeros(len(column), np.uint64)
    )
    keys = [pa.array(["a", "b", "a", None, "b", None, "c"])]
    groups = group_rows(keys, "key")
    assert groups.count == 4
    ids = groups.ids.tolist()
    assert ids[0] == ids[2] and ids[1] == ids[4] and ids[3] == ids[5]
    assert len({ids[0], ids[1], ids[3], ids[6]}) == 4


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.none() | st.text(max_size=6), min_size=1, max_size=12),
    st.integers(0, 5000),
    st.sampled_from([pa.string(), pa.large_string(), pa.binary(), pa.string_view()]),
)
def test_byte_values_hash_alike_hashed_once_per_distinct_value_or_per_row(
    distinct: list[str | None], offset: int, data_type: pa.DataType
) -> None:
    """Long columns of repeating values are hashed per distinct value: the hashes must be
    the per-row ones (the apply state stores them), NULLs aside (the caller masks them)."""
    rng = np.random.default_rng(offset)
    values = [distinct[i] for i in rng.integers(0, len(distinct), 6000 + offset)]
    if pa.types.is_binary(data_type):
        values = [None if v is None else v.encode() for v in values]
    column = pa.array(values, data_type).slice(offset)
    assert len(column) >= hashing._DICTIONARY_MIN_ROWS
    present = np.array([v is not None for v in values[offset:]])
    plain = column.cast(pa.large_binary()) if data_type == pa.string_view() else column
    per_row = hashing._each_bytes_hash(plain)
    assert np.array_equal(hashing._bytes_hash(column)[present], per_row[present])


def test_contract_violations_carry_the_client_conditions() -> None:
    base = {c: None for c in DATA} | {"id": 7}
    rows = [
        {**base, "_change_type": "insert", "_commit_version": 4},
        {**base, "_change_type": "insert", "_commit_version": 4},
    ]
    with pytest.raises(ChangelogSourceError) as caught:
        resolve(_table(rows), RowLevelRules((("id",),), True, True))
    assert caught.value.condition == (
        "CHANGELOG_CONTRACT_VIOLATION.UNEXPECTED_MULTIPLE_CHANGES_PER_ROW_VERSION"
    )
    assert caught.value.parameters == {"version": "4", "deletes": "0", "inserts": "2"}
    # Without update detection two inserts pass, as in the client's plans.
    assert resolve(_table(rows), RowLevelRules((("id",),), True, False)).num_rows == 2
    bad = [{**base, "_change_type": "upsert", "_commit_version": 4}]
    with pytest.raises(ChangelogSourceError) as caught:
        resolve(_table(bad), RowLevelRules((("id",),), True, False))
    assert caught.value.condition == "CHANGELOG_CONTRACT_VIOLATION.UNEXPECTED_CHANGE_TYPE"
    assert caught.value.parameters == {"changeType": "upsert"}


@pytest.mark.parametrize("row_id", [(("id",),), (("s",), ("key",)), None])
def test_buckets_split_rows_by_key_and_cover_every_row_once(row_id: Any) -> None:
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 50, 400)
    rows = [
        {
            **{c: None for c in DATA},
            "id": int(i),
            "s": f"s{i % 7}",
            "key": {"k": str(i % 3), "f": -0.0 if i % 2 else 0.0},
            "d": float(i),
            "_change_type": "insert",
            "_commit_version": 1,
        }
        for i in ids
    ]
    table = _table(rows)
    masks = [buckets_of(table, row_id, 4) == b for b in range(4)]
    assert (np.sum(masks, axis=0) == 1).all()
    names = [p[0] for p in row_id] if row_id is not None else ["id", "s", "d"]
    for mask in masks:
        inside = {tuple(str(r[c]) for c in names) for r in table.filter(pa.array(mask)).to_pylist()}
        outside = {
            tuple(str(r[c]) for c in names) for r in table.filter(pa.array(~mask)).to_pylist()
        }
        if row_id == (("s",), ("key",)):  # keys differing only in the sign of zero stay together
            inside = {(s, k.replace("-0.0", "0.0")) for s, k in inside}
            outside = {(s, k.replace("-0.0", "0.0")) for s, k in outside}
        assert not inside & outside


def test_resolving_never_imports_pandas(tmp_path: Path) -> None:
    """pyarrow's ``to_numpy``/``pa.array``/``pa.scalar`` import pandas, which then makes the
    full garbage collection a Python worker runs after every task walk pandas' objects
    too. Every type, NULLs, NaNs, nested keys, collisions regrouped: resolved in a fresh
    process, with the same rows as here and pandas never imported."""
    rows = [
        {**{c: None for c in DATA}, "id": i // 2, "_change_type": k, "_commit_version": 1 + i // 4}
        for i, k in enumerate(["delete", "insert"] * 6)
    ]
    for i, row in enumerate(rows):  # pair p: every column set, some NULL or NaN
        p = i // 2
        row.update(
            key={"k": SHORT_VALUES[p % 4], "f": [0.0, -0.0, math.nan, None][p % 4]},
            d=[math.nan, 1.5, None][p % 3] if i != 9 else 2.5,  # pair 4 is an update
            s=SHORT_VALUES[p % 4],
            m=[None, [("a", 1)]][p % 2],
            l=[[0.0, None], None, []][p % 3],
            b=[b"\x00", None][p % 2],
            t=datetime(2024, 1, 1, tzinfo=timezone.utc),
            n={"x": p % 2, "y": [None, ["a"]][p % 2]},
        )
    table = _table(rows)
    source, out = tmp_path / "in.arrow", tmp_path / "out.arrow"
    with pa.ipc.new_file(source, table.schema) as writer:
        writer.write_table(table)
    program = f"""
import sys
import pyarrow as pa
from spark_cdc.server_plugin.row_level.rules import RowLevelRules, buckets_of, resolve
table = pa.ipc.open_file({str(source)!r}).read_all()
results = []
for row_id, carryovers, updates in {RULES!r}:
    paths = None if row_id is None else tuple(tuple(c.split(".")) for c in row_id)
    results.append(resolve(table, RowLevelRules(paths, carryovers, updates)))
    buckets_of(table, paths, 4)
with pa.ipc.new_file({str(out)!r}, table.schema) as writer:
    for result in results:
        writer.write_table(result)
assert "pandas" not in sys.modules, "pandas was imported"
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    got = pa.ipc.open_file(out).read_all()
    expected = [
        resolve(
            table, RowLevelRules(None if r is None else tuple(tuple(c.split(".")) for c in r), c, u)
        )
        for r, c, u in RULES
    ]
    assert got.schema == table.schema
    assert _out(got) == _out(pa.concat_tables(expected))
    assert got.num_rows < len(RULES) * table.num_rows  # carry-overs were found and dropped


LINEAGES = st.sampled_from([None, (0, 1), (0, 2), (1, 1), (None, 1), (1, None)])


def _with_lineage(rows: list[dict[str, Any]], lineages: list[Any]) -> pa.Table:
    """``rows`` with ``LINEAGE_COLUMNS`` (row id, row version; either may be unknown)."""
    table = _table(rows)
    pairs = [lineage or (None, None) for lineage in lineages]
    for index, name in enumerate(LINEAGE_COLUMNS):
        column = pa.array([pair[index] for pair in pairs], pa.int64())
        table = table.add_column(len(DATA), name, column)
    return table


def _lineage_model(rows: list[dict[str, Any]], lineages: list[Any]) -> list[int]:
    """The rows left once pairs of one delete and one insert with the same known lineage
    in one commit are dropped, whatever their content."""
    groups: dict[Any, list[int]] = defaultdict(list)
    for index, (row, lineage) in enumerate(zip(rows, lineages, strict=True)):
        if lineage is not None and None not in lineage:
            groups[(lineage, row["_commit_version"])].append(index)
    dropped: set[int] = set()
    for members in groups.values():
        kinds = sorted(rows[i]["_change_type"] for i in members)
        if kinds == ["delete", "insert"]:
            dropped.update(members)
    return [i for i in range(len(rows)) if i not in dropped]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), rows=commits(), rules=st.sampled_from(RULES))
def test_lineage_pairs_go_first_then_the_whole_row_rules(
    data: st.DataObject, rows: list[dict[str, Any]], rules: tuple
) -> None:
    """Iceberg v3's lineage (``rowVersion``): a delete+insert pair with one known row id
    and row version is a carry-over without reading its columns; every other row meets
    the rules as without lineage (a row of unknown lineage, or a pair whose version
    changed: an update)."""
    row_id, carryovers, updates = rules
    lineages = [data.draw(LINEAGES) for _ in rows]
    paths = None if row_id is None else tuple(tuple(c.split(".")) for c in row_id)
    kept = _lineage_model(rows, lineages)
    left = _with_lineage([rows[i] for i in kept], [lineages[i] for i in kept])
    lineage_rules = RowLevelRules(paths, carryovers, updates, lineage=True)
    try:
        expected = resolve(left, RowLevelRules(paths, carryovers, updates))
    except ChangelogSourceError as error:
        with pytest.raises(ChangelogSourceError) as caught:
            resolve(_with_lineage(rows, lineages), lineage_rules)
        assert caught.value.condition == error.condition
        return
    got = resolve(_with_lineage(rows, lineages), lineage_rules)
    assert got.schema == left.schema
    assert _out(got) == _out(expected)


def test_lineage_alone_decides_a_pair_whatever_its_columns() -> None:
    """The same row id and version drop a pair whose columns differ (the writer says it is
    one row, unchanged), which the whole-row rule would call an update; a pair whose
    version changed meets that rule."""
    before = {**{name: None for name in DATA}, "id": 1, "s": "a", "_commit_version": 1}
    rows = [
        {**before, "_change_type": "delete"},
        {**before, "s": "b", "_change_type": "insert"},
        {**before, "id": 2, "_change_type": "delete"},
        {**before, "id": 2, "s": "c", "_change_type": "insert"},
    ]
    lineages = [(0, 1), (0, 1), (1, 1), (1, 2)]
    for lineage, kept in ((True, [2, 2]), (False, [1, 1, 2, 2])):
        rules = RowLevelRules((("id",),), True, True, lineage=lineage)
        got = resolve(_with_lineage(rows, lineages), rules)
        assert got.column("id").to_pylist() == kept
        assert set(got.column("_change_type").to_pylist()) == {
            "update_preimage",
            "update_postimage",
        }
