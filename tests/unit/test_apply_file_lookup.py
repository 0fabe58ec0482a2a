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
from spark_cdc.server_plugin.sinks.apply.engine.file_lookup import _dictionary_coded, rows_at


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


PAIRS = st.lists(st.tuples(st.integers(-5, 30), st.integers(0, 4)), max_size=30)


@settings(max_examples=60, deadline=None)
@given(files=st.lists(PAIRS, min_size=1, max_size=4), batch=PAIRS, versions=st.booleans())
def test_rows_of_keys_finds_every_row_of_the_batchs_keys_in_every_file(
    files: list[list[tuple[int, int]]], batch: list[tuple[int, int]], versions: bool
) -> None:
    """Files pruned by their statistics (the key's sorted values against each file's
    range; a version's start by range) and searched by their index find exactly the rows
    a plain membership test finds: type 1's keys, or type 2's versions (``versions``:
    the key indexed, its start confirmed)."""
    from deltalake import DeltaTable, write_deltalake
    from spark_cdc.server_plugin.sinks.apply.engine.file_lookup import rows_of_keys
    from spark_cdc.server_plugin.sinks.apply.engine.key_index import FileKeysCache

    names = ["id", "start"] if versions else ["id"]
    schema = pa.schema([("id", pa.int64()), ("start", pa.int64())])
    keys = pa.table({"id": [p[0] for p in batch], "start": [p[1] for p in batch]}, schema=schema)
    wanted = {p if versions else (p[0],) for p in batch}
    with tempfile.TemporaryDirectory() as folder:
        for pairs in files:
            rows = pa.table(
                {"id": [p[0] for p in pairs], "start": [p[1] for p in pairs]}, schema=schema
            )
            write_deltalake(folder, rows, mode="append")
        table = DeltaTable(folder)
        files = pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=True)).read_all()
        found = rows_of_keys(
            DeltaLog(table.table_uri, None),
            files,
            keys.select(names),
            names,
            FileKeysCache(1 << 20),
            indexed=1,
        )
        for uri in table.file_uris():
            path = Path(uri).name
            read = pq.read_table(uri).select(names).to_pylist()
            expected = [i for i, r in enumerate(read) if tuple(r.values()) in wanted]
            assert found.get(path, np.empty(0)).tolist() == expected
