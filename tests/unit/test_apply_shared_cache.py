"""The cache the machine's Python workers share (``sinks.apply.shared_cache``): a value made
by one process is found by another without being made again, whole (the tables as they
were, a file's key index finding the same rows), the least recently used files go past
the budget but none a round is using, and where Spark gives no local folder the values
are kept per process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from spark_cdc.server_plugin.sinks.apply.engine.key_index import BatchKeys, FileKeys, FileKeysCache
from spark_cdc.server_plugin.sinks.apply.engine.shared_cache import FOLDER, TABLE, SharedFiles

from tests.unit.test_apply_key_index import ROWS, _plain, _table


def _files(folder: Path, name: str = "rows") -> list[str]:
    return sorted(os.listdir(folder / FOLDER / name))


def test_a_value_made_by_one_process_is_mapped_by_another(tmp_path: Path) -> None:
    """Another process (a second worker) finds the table the first made, with every
    column's type (dictionary-coded text stays coded) and value."""
    table = pa.table(
        {
            "status": pa.array(["new", "paid", None, "new"]).dictionary_encode(),
            "amount": pa.array([1.5, None, 3.0, 4.0]),
            "seq": pa.array([1, 2, 3, 4], pa.int64()),
        }
    )
    shared = SharedFiles("rows", 1 << 20, TABLE, lambda: str(tmp_path))
    folder = shared.folder()
    assert folder is not None
    assert shared.get(folder, ("file", 0), lambda: table).equals(table)
    script = (
        "import sys, pyarrow as pa\n"
        "from spark_cdc.server_plugin.sinks.apply.engine.shared_cache import SharedFiles, TABLE\n"
        f"shared = SharedFiles('rows', 1 << 20, TABLE, lambda: {str(tmp_path)!r})\n"
        "found = shared.get(shared.folder(), ('file', 0), lambda: sys.exit('made again'))\n"
        "pa.ipc.new_stream(sys.stdout.buffer, found.schema).write_table(found)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True)
    assert pa.ipc.open_stream(out.stdout).read_all().equals(table)
    assert len(_files(tmp_path)) == 1


@settings(max_examples=60, deadline=None)
@given(rows=ROWS, batch=ROWS, names=st.sampled_from([["id"], ["id", "part"], ["nested"]]))
def test_a_shared_key_index_finds_what_the_one_it_was_made_from_finds(
    tmp_path_factory: object, rows: list, batch: list, names: list[str]
) -> None:
    """A file's key index read back from its shared file finds exactly the rows of the
    batch's keys, as the index it was made from does (hashed keys with the columns that
    confirm a match, integer keys by their values alone)."""
    folder = str(tmp_path_factory.mktemp("shared"))  # type: ignore[attr-defined]
    table, keys = _table(rows, names), _table(batch, names)
    wanted = BatchKeys.of(keys, names)
    cache = FileKeysCache(1 << 20, shared="keys")
    assert cache.shared is not None
    cache.shared.root = lambda: folder
    made = cache.keys(("f", 1, 2), lambda: table, wanted)
    mapped = cache.keys(("f", 1, 2), lambda: (_ for _ in ()).throw(AssertionError), wanted)
    expected = _plain(table, keys).tolist()
    assert made.positions(wanted).tolist() == mapped.positions(wanted).tolist() == expected
    assert isinstance(mapped, FileKeys)


def test_past_its_budget_the_least_recently_used_go_but_none_of_this_round(
    tmp_path: Path,
) -> None:
    """Room for two values: in a new round, a third drops the least recently used; when
    every kept value is the round's own, the one that does not fit is not kept."""
    value = pa.table({"x": pa.array(np.arange(1000), pa.int64())})
    shared = SharedFiles("rows", 1 << 30, TABLE, lambda: str(tmp_path))
    folder = shared.folder()
    assert folder is not None
    made: list[str] = []

    def get(key: str) -> None:
        assert shared.get(folder, key, lambda: made.append(key) or value).equals(value)

    def at(key: str, seconds: float) -> None:  # when the key's file was last used
        os.utime(shared.path(folder, key), (seconds, seconds))

    get("a")
    get("b")
    at("a", 1_000)
    at("b", 2_000)  # a is the least recently used
    shared.budget = 2 * os.path.getsize(shared.path(folder, "a")) + 100
    shared.next_round()
    get("c")  # a goes
    get("b")  # found: used in this round now
    get("a")  # made again; nothing else may go, so it is not kept
    get("a")
    assert made == ["a", "b", "c", "a", "a"]
    kept = sorted(shared.path(folder, k) for k in "bc")
    assert sorted(os.path.join(folder, n) for n in _files(tmp_path)) == kept


def test_without_spark_local_folder_values_are_kept_per_process(
    monkeypatch: object, tmp_path: Path
) -> None:
    """Code run outside Spark (no ``SPARK_LOCAL_DIRS``) keeps its values in the process,
    and writes no file; given the folder, it shares them there."""
    monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)  # type: ignore[attr-defined]
    cache = FileKeysCache(1 << 20, shared="keys")
    wanted = BatchKeys.of(_table([(1, None)], ["id"]), ["id"])
    columns = _table([(1, None), (2, None)], ["id"])
    assert cache.keys(("f", 1, 2), lambda: columns, wanted).positions(wanted).tolist() == [0]
    assert cache.keys(("f", 1, 2), lambda: 1 / 0, wanted).positions(wanted).tolist() == [0]
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path))  # type: ignore[attr-defined]
    cache.keys(("g", 1, 2), lambda: columns, wanted)
    assert len(_files(tmp_path, "keys")) == 1


def test_a_file_that_is_not_whole_is_made_again(tmp_path: Path) -> None:
    """A file that does not read as one of ours (cut short by hand, a disk error) is
    replaced by the value made again, not served and not raised."""
    value = pa.table({"x": [1, 2, 3]})
    shared = SharedFiles("rows", 1 << 20, TABLE, lambda: str(tmp_path))
    folder = shared.folder()
    assert folder is not None
    shared.get(folder, "k", lambda: value)
    path = shared.path(folder, "k")
    with open(path, "r+b") as file:
        file.truncate(os.path.getsize(path) // 2)
    made: list[int] = []
    assert shared.get(folder, "k", lambda: made.append(1) or value).equals(value)
    assert made == [1] and shared.get(folder, "k", lambda: 1 / 0).equals(value)
