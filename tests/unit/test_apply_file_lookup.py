"""Reading a file's rows at positions (``file_lookup.rows_at``): only the row groups that
hold them are read, and the rows come back as a plain ``take`` of the whole file gives
them, a column the file lacks as NULLs (a column added to the table later)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st
from spark_cdc.server_plugin.delta.log import DeltaLog
from spark_cdc.server_plugin.sinks.apply.file_lookup import rows_at


@settings(max_examples=80, deadline=None)
@given(
    rows=st.integers(1, 400),
    group=st.integers(1, 64),
    picked=st.lists(st.floats(0, 1, exclude_max=True), max_size=40),
    whole=st.booleans(),
)
def test_rows_at_positions_are_a_take_of_the_file(
    rows: int, group: int, picked: list[float], whole: bool
) -> None:
    table = pa.table({"k": np.arange(rows) * 3, "v": [f"v{i}" for i in range(rows)]})
    positions = np.unique((np.array(picked) * rows).astype(np.int64)) if picked else None
    schema = pa.schema([("v", pa.string()), ("k", pa.int64()), ("added", pa.float64())])
    with tempfile.TemporaryDirectory() as folder:
        pq.write_table(table, Path(folder, "part.parquet"), row_group_size=group)
        at = None if whole or positions is None else positions
        found = rows_at(DeltaLog(folder, None), "part.parquet", at, schema)
    wanted = table if at is None else table.take(pa.array(at))
    assert found.schema == schema
    assert found.column("k").to_pylist() == wanted.column("k").to_pylist()
    assert found.column("v").to_pylist() == wanted.column("v").to_pylist()
    assert found.column("added").null_count == found.num_rows
