"""Which delete files apply to which data file (Iceberg's rules), and the tasks a snapshot's
files make: the part of the Iceberg source no fixture pins down case by case."""

from __future__ import annotations

from types import SimpleNamespace

from spark_cdc.server_plugin.iceberg.changes import snapshot_tasks, table_tasks
from spark_cdc.server_plugin.iceberg.manifests import FileEntry, SnapshotFiles
from spark_cdc.server_plugin.iceberg.timeline import TimedSnapshot

UNPARTITIONED = frozenset({0})


def _entry(
    path: str,
    content: int,
    sequence: int,
    spec: int = 1,
    partition: tuple = ("a",),
    referenced: str | None = None,
) -> FileEntry:
    data_file = SimpleNamespace(
        file_path=path, content=content, spec_id=spec, partition=partition, file_size_in_bytes=10
    )
    return FileEntry(data_file, sequence, sequence, referenced, None, None)


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
