"""Which delete files apply to which data file (Iceberg's rules), and the tasks a snapshot's
files make: the part of the Iceberg source no fixture pins down case by case."""

from __future__ import annotations

from types import SimpleNamespace

from spark_cdc.server_plugin.iceberg.changes import TableLayout, snapshot_tasks, table_tasks
from spark_cdc.server_plugin.iceberg.manifests import FileEntry, SnapshotFiles
from spark_cdc.server_plugin.iceberg.timeline import TimedSnapshot

UNPARTITIONED = TableLayout(frozenset({0}))


def _entry(
    path: str,
    content: int,
    sequence: int,
    spec: int = 1,
    partition: tuple = ("a",),
    referenced: str | None = None,
    bounds: tuple[int, int] | None = None,
    nulls: int = 0,
) -> FileEntry:
    """A file; ``bounds`` are column 1's (a ``long``), which an equality delete matches on."""
    data_file = SimpleNamespace(
        file_path=path,
        content=content,
        spec_id=spec,
        partition=partition,
        file_size_in_bytes=10,
        equality_ids=[1] if content == 2 else None,
        lower_bounds={} if bounds is None else {1: _long(bounds[0])},
        upper_bounds={} if bounds is None else {1: _long(bounds[1])},
        null_value_counts={1: nulls},
    )
    return FileEntry(data_file, sequence, sequence, referenced, None, None)


def _long(value: int) -> bytes:
    return value.to_bytes(8, "little", signed=True)


def _snapshot(version: int, operation: str = "overwrite") -> TimedSnapshot:
    summary = SimpleNamespace(operation=SimpleNamespace(value=operation))
    return TimedSnapshot(SimpleNamespace(summary=summary), version, 1000 + version)


def _files(
    live: list[FileEntry], added: list[FileEntry], removed: list[FileEntry]
) -> SnapshotFiles:
    return SnapshotFiles(
        {e.key: e for e in live}, {e.key: e for e in added}, {e.key: e for e in removed}
    )


def _keys(entries: tuple[FileEntry, ...] | None) -> set[tuple[str, int, int]]:
    return {e.key for e in entries or ()}


def test_deletes_apply_by_sequence_number_partition_and_path() -> None:
    old = _entry("old.parquet", 0, 1)
    other = _entry("other.parquet", 0, 1)  # beside old, but the deletion vector is old's
    same = _entry("same.parquet", 0, 3)
    elsewhere = _entry("elsewhere.parquet", 0, 1, partition=("b",))
    position = _entry("pos.parquet", 1, 3)  # seq >= data seq, same partition
    equality = _entry("eq.parquet", 2, 3)  # seq > data seq, same partition
    everywhere = _entry("eq-global.parquet", 2, 3, spec=0, partition=())
    vector = _entry("dv.puffin", 1, 3, referenced="old.parquet")
    new = [position, equality, everywhere, vector]
    live = [old, other, same, elsewhere, *new]
    tasks = snapshot_tasks(_snapshot(3), _files(live, [same, *new], []), UNPARTITIONED)
    by_path = {(t.path, t.change_type): t for t in tasks}
    assert by_path[("same.parquet", "insert")].without == tuple(
        sorted([position], key=lambda d: d.key)
    )
    old_deletes = by_path[("old.parquet", "delete")]
    assert _keys(old_deletes.only) == _keys((position, equality, everywhere, vector))
    assert old_deletes.without == ()
    assert _keys(by_path[("other.parquet", "delete")].only) == _keys(
        (position, equality, everywhere)
    )
    assert _keys(by_path[("elsewhere.parquet", "delete")].only) == _keys((everywhere,))
    assert len(tasks) == 4


def test_a_removed_file_serves_its_rows_live_at_the_parent() -> None:
    data = _entry("data.parquet", 0, 1)
    earlier = _entry("pos-1.parquet", 1, 2)
    rewritten = _entry("rewritten.parquet", 0, 3)
    files = _files([rewritten], [rewritten], [data, earlier])
    tasks = snapshot_tasks(_snapshot(3), files, UNPARTITIONED)
    assert [(t.path, t.change_type, t.only, t.without) for t in tasks] == [
        ("rewritten.parquet", "insert", None, ()),
        ("data.parquet", "delete", None, (earlier,)),
    ]


def test_replace_serves_nothing_and_a_table_serves_its_live_rows() -> None:
    data = _entry("data.parquet", 0, 1)
    position = _entry("pos.parquet", 1, 2)
    files = _files([data, position], [data], [])
    assert snapshot_tasks(_snapshot(2, "replace"), files, UNPARTITIONED) == []
    [task] = table_tasks(_snapshot(2), files, UNPARTITIONED)
    assert (task.path, task.change_type, task.without) == ("data.parquet", "insert", (position,))


def test_an_equality_delete_reaches_only_files_whose_bounds_overlap_its_own() -> None:
    """Iceberg's DeleteFileIndex test: ranges of column 1 (a long; negative values order
    as numbers, not as bytes) disjoint from the delete's keep a file out; a file or a
    delete without bounds, a delete holding a NULL key, or a column whose type is not
    known, reach every file."""
    layout = TableLayout(frozenset({0}), {1: "long"})
    below = _entry("below.parquet", 0, 1, spec=0, partition=(), bounds=(-300, -101))
    inside = _entry("inside.parquet", 0, 1, spec=0, partition=(), bounds=(-100, -100))
    above = _entry("above.parquet", 0, 1, spec=0, partition=(), bounds=(1, 500))
    unknown = _entry("unknown.parquet", 0, 1, spec=0, partition=())
    data = [below, inside, above, unknown]

    def reached(delete: FileEntry, given: TableLayout = layout) -> set[str]:
        tasks = snapshot_tasks(_snapshot(2), _files([*data, delete], [delete], []), given)
        return {t.path for t in tasks}

    keys = _entry("eq.parquet", 2, 2, spec=0, partition=(), bounds=(-100, 0))
    assert reached(keys) == {"inside.parquet", "unknown.parquet"}
    with_null = _entry("eq.parquet", 2, 2, spec=0, partition=(), bounds=(-100, 0), nulls=1)
    assert reached(with_null) == {f.path for f in data}
    no_bounds = _entry("eq.parquet", 2, 2, spec=0, partition=())
    assert reached(no_bounds) == {f.path for f in data}
    assert reached(keys, TableLayout(frozenset({0}), {1: "double"})) == {f.path for f in data}
