"""What a snapshot contributes to the change feed, as one task per data file.

From the files live at the snapshot (S) and at its parent (P), read from S's own manifests
(``manifests.snapshot_files``), and which delete files apply to which data file:

- a data file S added: its rows, less those S's own deletes remove, are inserts;
- a data file S removed (a copy-on-write rewrite or delete): its rows still live at P are
  deletes (the rewritten rows come back as inserts of the new file: carry-overs, which the
  row-level passes remove);
- a data file live at both that a delete file S added or removed can reach (merge-on-read):
  the rows dead at S but not at P are deletes (and, should a delete file ever be dropped
  without its data file, rows live again are inserts);
- ``replace`` (compaction, delete-file rewrites) changes no row: nothing.

Which delete files apply to a data file is Iceberg's rule: position deletes and deletion
vectors when their sequence number is at least the data file's, in its partition (a
deletion vector or a delete naming one file: that file only); equality deletes when their
sequence number is greater, in the data file's partition or, written under an
unpartitioned spec, everywhere, and only where the column bounds both files keep overlap
(Iceberg's own ``DeleteFileIndex`` test), so an equality delete reads only the files it
can reach. The rows they remove are found when the task reads the file (``deletes``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import InputPartition
from spark_cdc.server_plugin.iceberg.manifests import FileEntry, SnapshotFiles
from spark_cdc.server_plugin.iceberg.timeline import TimedSnapshot
from spark_cdc.server_plugin.vocabulary import DELETE, INSERT

DATA, POSITION_DELETES, EQUALITY_DELETES = 0, 1, 2


@dataclass(frozen=True)
class IcebergTask(InputPartition):
    """One data file of one snapshot. The rows read are those the ``only`` deletes remove
    (when given; else all), less those the ``without`` deletes remove."""

    path: str
    change_type: str
    version: int
    timestamp_ms: int
    size: int
    file: FileEntry
    only: tuple[FileEntry, ...] | None = None
    without: tuple[FileEntry, ...] = ()


@dataclass(frozen=True)
class TableLayout:
    """What placing deletes needs of the table: the spec ids without partition fields
    (whose equality deletes apply everywhere) and the type of each column by field id
    (``str`` of pyiceberg's type), for reading column bounds."""

    unpartitioned: frozenset[int]
    types: Mapping[int, str] = field(default_factory=dict)

    @classmethod
    def of(cls, metadata: Any) -> TableLayout:
        """The layout of a table's metadata (every schema's columns: deletes written under
        an older schema name their field ids)."""
        from pyiceberg.schema import index_by_id

        specs = metadata.specs().items()
        return cls(
            frozenset(spec_id for spec_id, spec in specs if spec.is_unpartitioned()),
            {
                field_id: str(column.field_type)
                for schema in metadata.schemas
                for field_id, column in index_by_id(schema).items()
                if column.field_type.is_primitive
            },
        )


def snapshot_tasks(
    timed: TimedSnapshot, files: SnapshotFiles, layout: TableLayout
) -> list[IcebergTask]:
    """The tasks of snapshot ``timed``'s changes."""
    if timed.operation == "replace":
        return []
    at = _Deletes(files.live.values(), layout)
    before = _Deletes(files.parent_live().values(), layout)
    tasks = [
        _task(timed, entry, INSERT, without=at.of(entry))
        for entry in files.added.values()
        if entry.content == DATA
    ]
    tasks += [
        _task(timed, entry, DELETE, without=before.of(entry))
        for entry in files.removed.values()
        if entry.content == DATA
    ]
    changed = [e for e in (*files.added.values(), *files.removed.values()) if e.content != DATA]
    if changed:
        for entry in files.live.values():
            if entry.content != DATA or entry.key in files.added:
                continue
            if not any(_applies(d, entry, layout) for d in changed):
                continue
            now, then = at.of(entry), before.of(entry)
            now_keys, then_keys = {d.key for d in now}, {d.key for d in then}
            if now_keys - then_keys:
                tasks.append(_task(timed, entry, DELETE, only=now, without=then))
            if then_keys - now_keys:
                tasks.append(_task(timed, entry, INSERT, only=then, without=now))
    return tasks


def table_tasks(
    timed: TimedSnapshot, files: SnapshotFiles, layout: TableLayout
) -> list[IcebergTask]:
    """Every live row of snapshot ``timed``, as inserts (a stream's initial snapshot)."""
    at = _Deletes(files.live.values(), layout)
    return [
        _task(timed, entry, INSERT, without=at.of(entry))
        for entry in files.live.values()
        if entry.content == DATA
    ]


def _task(
    timed: TimedSnapshot,
    entry: FileEntry,
    kind: str,
    only: tuple[FileEntry, ...] | None = None,
    without: tuple[FileEntry, ...] = (),
) -> IcebergTask:
    size = int(entry.data_file.file_size_in_bytes)
    return IcebergTask(
        entry.path, kind, timed.version, timed.timestamp_ms, size, entry, only, without
    )


class _Deletes:
    """A snapshot's live delete files, indexed by where they can apply."""

    def __init__(self, entries: Iterable[FileEntry], layout: TableLayout) -> None:
        self.layout = layout
        self.by_partition: dict[tuple[int, Any], list[FileEntry]] = {}
        self.by_file: dict[str, list[FileEntry]] = {}
        self.everywhere: list[FileEntry] = []
        for entry in entries:
            if entry.content == DATA:
                continue
            if entry.content == POSITION_DELETES and entry.referenced_data_file is not None:
                self.by_file.setdefault(entry.referenced_data_file, []).append(entry)
            elif (
                entry.content == EQUALITY_DELETES
                and entry.data_file.spec_id in layout.unpartitioned
            ):
                self.everywhere.append(entry)
            else:
                self.by_partition.setdefault(_partition(entry), []).append(entry)

    def of(self, data: FileEntry) -> tuple[FileEntry, ...]:
        """The delete files that apply to data file ``data``, in a stable order."""
        candidates = (
            *self.by_file.get(data.path, ()),
            *self.by_partition.get(_partition(data), ()),
            *self.everywhere,
        )
        found = [d for d in candidates if _applies(d, data, self.layout)]
        return tuple(sorted(found, key=lambda d: d.key))


def _partition(entry: FileEntry) -> tuple[int, Any]:
    return (int(entry.data_file.spec_id), entry.data_file.partition)


def _applies(delete: FileEntry, data: FileEntry, layout: TableLayout) -> bool:
    if delete.content == POSITION_DELETES:
        if delete.sequence_number < data.sequence_number:
            return False
        if delete.referenced_data_file is not None:
            return delete.referenced_data_file == data.path
        return _partition(delete) == _partition(data)
    if delete.content == EQUALITY_DELETES:
        if delete.sequence_number <= data.sequence_number:
            return False
        spec = delete.data_file.spec_id
        if spec not in layout.unpartitioned and _partition(delete) != _partition(data):
            return False
        return _bounds_overlap(delete, data, layout.types)
    return False


def _bounds_overlap(delete: FileEntry, data: FileEntry, types: Mapping[int, str]) -> bool:
    """Whether ``data`` may hold a row equal in every equality column to one of
    ``delete``'s: false when, in one of them, the ranges of non-NULL values both files
    record are disjoint and the delete holds no NULL there. A bound missing, or a type
    whose bounds have no order to trust here (floating point: NaN), says they may."""
    for field_id in delete.data_file.equality_ids or ():
        nulls = getattr(delete.data_file, "null_value_counts", None) or {}
        if nulls.get(field_id, 1) != 0:
            continue
        kind = types.get(field_id)
        deleted, held = (
            _range(delete.data_file, field_id, kind),
            _range(data.data_file, field_id, kind),
        )
        if deleted is None or held is None:
            continue
        if deleted[1] < held[0] or held[1] < deleted[0]:
            return False
    return True


def _range(data_file: Any, field_id: int, kind: str | None) -> tuple[Any, Any] | None:
    """A file's lower and upper bound of a column, comparable (Iceberg's single-value
    serialization: little-endian integers, big-endian decimals, bytes for text)."""
    lower = (getattr(data_file, "lower_bounds", None) or {}).get(field_id)
    upper = (getattr(data_file, "upper_bounds", None) or {}).get(field_id)
    order = None if kind is None else _ORDER.get(kind.split("(")[0].split("[")[0].strip())
    if lower is None or upper is None or order is None:
        return None
    return order(lower), order(upper)


def _little(raw: bytes) -> int:
    return int.from_bytes(raw, "little", signed=True)


def _big(raw: bytes) -> int:
    return int.from_bytes(raw, "big", signed=True)


# Types whose serialized bounds order as their values (text by its UTF-8 bytes, as
# Iceberg orders it; truncated bounds stay bounds); a type not here is never pruned on.
_ORDER: dict[str, Any] = {
    **dict.fromkeys(("int", "long", "date", "time", "timestamp", "timestamptz"), _little),
    **dict.fromkeys(("string", "binary", "fixed", "uuid", "boolean"), bytes),
    "decimal": _big,
}
