"""Reading a file's rows at positions (``file_lookup.rows_at``): only the row groups that
hold them are read, and the rows come back as a plain ``take`` of the whole file gives
them, a column the file lacks as NULLs (a column added to the table later); string columns
written as dictionaries are read as dictionaries, the others plain."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st
from spark_cdc.server_plugin.delta.log import DeltaLog
from spark_cdc.server_plugin.sinks.apply.file_lookup import _dictionary_coded, rows_at


@settings(max_examples=80, deadline=None)
@given(
    rows=st.integers(1, 400),
    group=st.integers(1, 64),
    picked=st.lists(st.floats(0, 1, exclude_max=True), max_size=40),
    whole=st.booleans(),
    distinct=st.integers(1, 400),
    dictionary_bytes=st.sampled_from([64, 1 << 20]),
)
def test_rows_at_positions_are_a_take_of_the_file(
    rows: int, group: int, picked: list[float], whole: bool, distinct: int, dictionary_bytes: int
) -> None:
    """``dictionary_bytes``: a small limit makes row groups fall back to plain values."""
    codes = [None if i % 7 == 3 else f"c{i % distinct}" for i in range(rows)]
    table = pa.table({"k": np.arange(rows) * 3, "v": [f"v{i}" for i in range(rows)], "c": codes})
    positions = np.unique((np.array(picked) * rows).astype(np.int64)) if picked else None
    schema = pa.schema(
        [("v", pa.string()), ("c", pa.large_string()), ("k", pa.int64()), ("added", pa.float64())]
    )
    with tempfile.TemporaryDirectory() as folder:
        pq.write_table(
            table,
            Path(folder, "part.parquet"),
            row_group_size=group,
            dictionary_pagesize_limit=dictionary_bytes,
        )
        at = None if whole or positions is None else positions
        found = rows_at(DeltaLog(folder, None), "part.parquet", at, schema)
    wanted = table if at is None else table.take(pa.array(at))
    assert found.schema == schema
    assert found.column("k").to_pylist() == wanted.column("k").to_pylist()
    assert found.column("v").to_pylist() == wanted.column("v").to_pylist()
    assert found.column("c").to_pylist() == wanted.column("c").to_pylist()
    assert found.column("added").null_count == found.num_rows


def test_only_columns_written_as_dictionaries_are_read_as_dictionaries(tmp_path: Path) -> None:
    """A column of few values is read as a dictionary; one whose dictionary outgrew its
    page and fell back to plain values, and a number column, are read plain."""
    rows = 50_000
    table = pa.table(
        {
            "few": [f"state-{i % 5}" for i in range(rows)],
            "unique": [f"customer-{i:08d}" for i in range(rows)],
            "k": np.arange(rows),
        }
    )
    pq.write_table(table, tmp_path / "part.parquet", dictionary_pagesize_limit=16 << 10)
    parquet = pq.ParquetFile(tmp_path / "part.parquet")
    assert _dictionary_coded(parquet, ["few", "unique", "k"]) == ["few"]
