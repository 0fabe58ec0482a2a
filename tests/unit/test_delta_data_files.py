"""Data files written with pyarrow (``delta.data_files``): their statistics are those
delta-rs gives the same rows (random rows of every type the path takes, text at the 64-byte
cut and around characters with no successor), and a table naming them opens in delta-rs
and polars with the rows written; what the path does not take goes to delta-rs."""

from __future__ import annotations

import datetime as dt
import json
import tempfile
from pathlib import Path
from typing import Any

import polars
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spark_cdc.server_plugin.delta import data_files

UTC = dt.timezone.utc
_EPOCH_US = (-(2**62), 2**62)  # within what numpy's datetime64 and Parquet's INT64 hold
_TYPES: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "i8": (pa.int8(), st.integers(-128, 127)),
    "i16": (pa.int16(), st.integers(-(2**15), 2**15 - 1)),
    "i32": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "i64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "f32": (pa.float32(), st.floats(width=32, allow_infinity=False)),
    "f64": (pa.float64(), st.floats(allow_infinity=False)),
    "flag": (pa.bool_(), st.booleans()),
    "text": (
        pa.string(),
        st.text(
            st.sampled_from(["a", "b", "\x7f", "\x80", "é", "\u07ff", "\uffff", "\U0010ffff"]),
            max_size=80,
        ),
    ),
    "day": (pa.date32(), st.dates()),
    "at": (
        pa.timestamp("us", "UTC"),
        st.datetimes(timezones=st.just(UTC), min_value=dt.datetime(1, 1, 2)),
    ),
    "local": (pa.timestamp("us"), st.datetimes(min_value=dt.datetime(1, 1, 2))),
}


def _delta_rs_stats(rows: pa.Table) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        write_deltalake(folder, rows)
        log = Path(folder, "_delta_log", f"{0:020d}.json").read_text().splitlines()
        return json.loads(next(json.loads(a)["add"]["stats"] for a in log if '"add"' in a))


def _ours(folder: str, rows: pa.Table, dictionary: set[str]) -> dict[str, Any]:
    return data_files.write(folder, "", rows, {}, dictionary)


@st.composite
def _tables(draw: st.DrawFn) -> pa.Table:
    names = draw(st.lists(st.sampled_from(sorted(_TYPES)), min_size=1, max_size=5, unique=True))
    count = draw(st.integers(1, 12))  # delta-rs writes no file of no rows
    columns = {}
    for name in names:
        kind, values = _TYPES[name]
        cells = draw(st.lists(st.none() | values, min_size=count, max_size=count))
        columns[name] = pa.array(cells, kind)
    return pa.table(columns)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=_tables(), coded=st.booleans())
def test_statistics_equal_delta_rs(rows: pa.Table, coded: bool) -> None:
    dictionary = set(rows.column_names) if coded else set()
    with tempfile.TemporaryDirectory() as folder:
        add = _ours(folder, rows, dictionary)
        assert json.loads(add["stats"]) == _delta_rs_stats(rows)
        read = pq.read_table(Path(folder, add["path"]))
        assert read.schema == rows.schema
        assert repr(read.to_pylist()) == repr(rows.to_pylist())  # NaN as NaN, -0.0 as -0.0


def test_text_statistics_cut_at_64_bytes_as_delta_rs() -> None:
    texts = [
        "b" * 100,
        "é" * 40,
        "a" * 63 + "é",
        "a" * 31 + "\U0010ffff" * 3,
        "\U0010ffff" * 40,
        "a" * 62 + "\u07ff" * 2,
        "a" * 63 + "\x7f\x7f",
    ]
    for text in texts:
        rows = pa.table({"s": [text, "a"]})
        with tempfile.TemporaryDirectory() as folder:
            stats = json.loads(_ours(folder, rows, set())["stats"])
        assert stats == _delta_rs_stats(rows), text


def test_only_the_first_32_columns_have_statistics() -> None:
    rows = pa.table({f"c{i}": [i, i + 1] for i in range(35)})
    with tempfile.TemporaryDirectory() as folder:
        stats = json.loads(_ours(folder, rows, set())["stats"])
    assert stats == _delta_rs_stats(rows)
    assert sorted(stats["nullCount"]) == sorted(f"c{i}" for i in range(32))


def test_a_table_naming_the_files_opens_in_delta_rs_and_polars() -> None:
    from deltalake.transaction import AddAction

    rows = pa.table(
        {
            "id": pa.array([3, 1, 2], pa.int64()),
            "name": pa.array(["x", None, "y"]).dictionary_encode(),
            "at": pa.array([dt.datetime(2024, 5, 1, tzinfo=UTC)] * 3, pa.timestamp("us", "UTC")),
        }
    )
    typed = rows.set_column(1, "name", rows.column("name").cast(pa.string()))
    with tempfile.TemporaryDirectory() as folder:
        write_deltalake(folder, typed.slice(0, 0))
        table = DeltaTable(folder)
        add = data_files.write(folder, "", rows, {}, {"name"})
        action = AddAction(
            add["path"], add["size"], {}, add["modificationTime"], True, add["stats"]
        )
        table.create_write_transaction([action], "append", typed.schema)
        read = DeltaTable(folder).to_pyarrow_table().sort_by("id")
        assert read.equals(typed.sort_by("id"))
        assert (
            polars.read_delta(folder)
            .sort("id")
            .to_arrow()
            .equals(
                polars.from_arrow(typed.sort_by("id")).to_arrow()  # polars' own string type
            )
        )


def test_a_partitioned_file_goes_into_its_folder() -> None:
    rows = pa.table({"a": [1, 2]})
    with tempfile.TemporaryDirectory() as folder:
        add = data_files.write(folder, "p=x%20y", rows, {"p": "x y"}, set())
        assert add["path"].startswith("p=x%20y/part-")
        assert add["partitionValues"] == {"p": "x y"}
        assert Path(folder, "p=x y", add["path"].split("/")[1]).exists()


@pytest.mark.parametrize(
    ("schema", "configuration"),
    [
        (pa.schema([("d", pa.decimal128(5, 2))]), {}),
        (pa.schema([("s", pa.struct([("x", pa.int32())]))]), {}),
        (pa.schema([("l", pa.list_(pa.int32()))]), {}),
        (pa.schema([("b", pa.binary())]), {}),
        (pa.schema([("t", pa.timestamp("ns"))]), {}),
        (pa.schema([("a", pa.int64())]), {"delta.dataSkippingNumIndexCols": "1"}),
        (pa.schema([("a", pa.int64())]), {"delta.dataSkippingStatsColumns": "a"}),
    ],
)
def test_what_the_path_does_not_take_goes_to_delta_rs(
    schema: pa.Schema, configuration: dict[str, str]
) -> None:
    assert not data_files.writes(schema, configuration)


def test_the_types_it_takes() -> None:
    schema = pa.schema([(n, kind) for n, (kind, _) in _TYPES.items()])
    coded = pa.schema([("s", pa.dictionary(pa.int32(), pa.string()))])
    assert data_files.writes(schema, {}) and data_files.writes(coded, {})


def test_rows_staged_by_an_integer_partition_open_as_delta_rs_wrote_them() -> None:
    """``staging.staged_files`` of a table partitioned by an integer column (the state's
    bucket) writes a file per partition in its folder; a table naming them reads back the
    rows, as one whose files delta-rs wrote."""
    from deltalake.transaction import AddAction
    from spark_cdc.server_plugin.sinks.apply.delta import staging

    rows = pa.table({"id": [1, 2, 3, 4], "v": ["a", "b", "a", None], "bucket": [0, 1, 0, 7]})
    with tempfile.TemporaryDirectory() as ours, tempfile.TemporaryDirectory() as theirs:
        write_deltalake(ours, rows.slice(0, 0), partition_by=["bucket"])
        adds = staging.staged_files(ours, rows, ["bucket"], keys=("id",))
        assert sorted(a["path"].split("/")[0] for a in adds) == ["bucket=0", "bucket=1", "bucket=7"]
        assert all(a["partitionValues"] == {"bucket": a["path"][7]} for a in adds)
        actions = [
            AddAction(
                a["path"], a["size"], a["partitionValues"], a["modificationTime"], True, a["stats"]
            )
            for a in adds
        ]
        DeltaTable(ours).create_write_transaction(actions, "append", rows.schema)
        write_deltalake(theirs, rows, partition_by=["bucket"])
        read = [DeltaTable(t).to_pyarrow_table().sort_by("id") for t in (ours, theirs)]
        assert read[0].equals(read[1])
        assert polars.read_delta(ours).sort("id").equals(polars.read_delta(theirs).sort("id"))
