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
    """Under the limit, one table of the batches in order; past it, tables of whole parts
    (several only while they fit the limit), each part's rows in their order, every row
    once."""
    table = pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([str(k) for k in keys])})
    batches = table.to_batches(size)
    parts = list(in_parts(iter(batches), _part, 3, most_bytes, most_bytes))
    if table.nbytes <= most_bytes or not keys:
        assert [p.to_pylist() for p in parts] == ([table.to_pylist()] if keys else [])
        return
    held = [sorted(set((p.column("k").to_numpy() % 3).tolist())) for p in parts]
    assert sorted(part for found in held for part in found) == sorted(set(np.array(keys) % 3))
    for p, found in zip(parts, held, strict=True):
        assert len(found) == 1 or p.nbytes <= most_bytes
        for part in found:
            rows = [r for r in p.to_pylist() if r["k"] % 3 == part]
            assert rows == [r for r in table.to_pylist() if r["k"] % 3 == part]
        assert p.schema == table.schema


def test_parts_are_read_back_together_while_they_fit() -> None:
    """Past the limit, neighbouring parts come back in one table while their files fit
    ``most_bytes``: 3 parts of about 200 KB each in 2 tables under 500 KB, 3 under 100 KB."""
    keys = list(range(30_000))
    table = pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([f"{k:08}" for k in keys])})
    batches = table.to_batches(1000)
    for most_bytes, tables in ((500_000, 2), (100_000, 3)):
        parts = list(in_parts(iter(batches), _part, 3, 0, most_bytes))
        assert len(parts) == tables
        assert sum(p.num_rows for p in parts) == len(keys)
