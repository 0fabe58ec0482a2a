"""``spill.in_parts``: a task's rows held whole while they are few, else spilled to disk in
parts and read back one part at a time, every row once."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from spark_cdc.server_plugin.spill import in_parts


def _part(batch: pa.RecordBatch) -> np.ndarray:
    return batch.column("k").to_numpy() % 3


@settings(max_examples=40, deadline=None)
@given(
    keys=st.lists(st.integers(0, 50), max_size=40),
    size=st.integers(1, 7),
    most_bytes=st.sampled_from([0, 64, 1 << 20]),
)
def test_every_row_comes_back_once_in_its_part(keys: list[int], size: int, most_bytes: int) -> None:
    """Under the limit, one table of the batches in order; past it, one table per part
    that has rows, each holding that part's rows in their order, every row once."""
    table = pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([str(k) for k in keys])})
    batches = table.to_batches(size)
    parts = list(in_parts(iter(batches), _part, 3, most_bytes))
    if table.nbytes <= most_bytes or not keys:
        assert [p.to_pylist() for p in parts] == ([table.to_pylist()] if keys else [])
        return
    found = [p.column("k").to_numpy() % 3 for p in parts]
    assert all(len(set(f.tolist())) == 1 for f in found)
    assert sorted(int(f[0]) for f in found) == sorted(set(np.array(keys) % 3))
    for p in parts:
        part = int(p.column("k")[0].as_py()) % 3
        assert p.to_pylist() == [r for r in table.to_pylist() if r["k"] % 3 == part]
    assert p.schema == table.schema
