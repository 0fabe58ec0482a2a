"""Merge-on-read for an Iceberg target, as Iceberg's Spark writer does it when a table asks
for it (``write.merge.mode=merge-on-read``; apply_changes is a MERGE): the rows a batch
replaces are marked deleted by *position delete files* instead of being rewritten with
their whole data files. A batch whose keys are spread over a large table then reads the
key columns of the files its keys may be in and writes a few small files, where
copy-on-write reads and rewrites every row of those files.

What is written is what every reader of Iceberg v2 tables opens (pyiceberg, polars, Spark,
Trino, DuckDB), in the shape the newest writers give it: one delete file per data file
(its ``file_path`` bounds name that file alone, which polars' reader requires), holding
every position deleted in that file so far; the delete files it replaces are removed in
the same snapshot, so a data file has one delete file however many batches touched it.
Only format version 2 has position delete files (version 3 has deletion vectors in their
place, which are not written here): another version asking for merge-on-read is refused
by name before anything is written.

pyiceberg 0.12 reads delete files but commits none: ``RowDelta`` is its overwrite
producer with a delete manifest added (``ManifestWriterV2`` declares data content only).
Private names of pyiceberg used here: ``_OverwriteFiles`` and its hooks, ``_read_deletes``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from spark_cdc.server_plugin.errors import error

MODE_PROPERTY = "write.merge.mode"
MERGE_ON_READ = "merge-on-read"
COPY_ON_WRITE = "copy-on-write"
_PATH_ID = 2147483546  # Iceberg's reserved field ids of a position delete file's columns
_POS_ID = 2147483545
_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": str(_PATH_ID).encode()}),
        pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": str(_POS_ID).encode()}),
    ]
)


def merges_on_read(name: str, properties: Mapping[str, str], version: int) -> bool:
    """Whether the table ``name`` of ``properties`` and format ``version`` asks for
    merge-on-read (``write.merge.mode``; Iceberg's default is copy-on-write); refused by
    name where it cannot be served: a format version other than 2, or a mode Iceberg does
    not know."""
    mode = properties.get(MODE_PROPERTY, COPY_ON_WRITE).strip().lower()
    if mode == COPY_ON_WRITE:
        return False
    if mode == MERGE_ON_READ and version == 2:
        return True
    if mode == MERGE_ON_READ:
        problem = (
            f"format version {version} has no position delete files"
            if version < 2
            else f"format version {version} keeps deletes as deletion vectors, "
            "which apply_changes does not write"
        )
        fix = f"set {MODE_PROPERTY}={COPY_ON_WRITE}, or apply to a format-version 2 target"
    else:
        problem = f"Iceberg knows only {COPY_ON_WRITE} and {MERGE_ON_READ}"
        fix = f"set {MODE_PROPERTY} to one of them"
    raise error(
        "APPLY_CHANGES.UNSUPPORTED_WRITE_MODE",
        path=name,
        property=MODE_PROPERTY,
        value=properties.get(MODE_PROPERTY),
        problem=problem,
        fix=fix,
    )


@dataclass(frozen=True)
class Marked:
    """A data file's new position delete file, and the delete files it replaces."""

    deletes: Any
    replaced: tuple[Any, ...]


def scoped_to(delete_file: Any, data_file: Any) -> bool:
    """Whether ``delete_file`` holds positions of ``data_file`` alone (its ``file_path``
    bounds are that path): the delete files a new one for that data file replaces."""
    lower, upper = delete_file.lower_bounds or {}, delete_file.upper_bounds or {}
    path = data_file.file_path.encode()
    return lower.get(_PATH_ID) == path and upper.get(_PATH_ID) == path


def marked(
    table: Any,
    tasks: Iterable[Any],
    positions_of: Any,
    name: str,
) -> list[Marked]:
    """For each of ``tasks``' data files in which ``positions_of(task)`` (the positions of
    the rows a batch replaces) finds rows no delete file marks yet, a new delete file
    ``name``-d holding them and every position the file's own delete files (``scoped_to``)
    marked, which it replaces; a delete file of several data files stays. The files are
    read and written in parallel (Arrow leaves Python's lock)."""

    def mark(numbered: tuple[int, Any]) -> Marked | None:
        number, task = numbered
        found = positions_of(task)
        if not len(found):
            return None
        path = task.file.file_path
        before = {d: _positions(table.io, d, path) for d in task.delete_files}
        new = np.setdiff1d(found, _union(before.values()))
        if not len(new):
            return None
        own = tuple(d for d in task.delete_files if scoped_to(d, task.file))
        every = np.union1d(_union(before[d] for d in own), new)
        location = os.path.join(os.path.dirname(path), f"{name}-{number}-deletes.parquet")
        return Marked(_written(table.io, location, task.file, every), own)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return [m for m in pool.map(mark, enumerate(tasks)) if m is not None]


def _positions(io: Any, delete_file: Any, path: str) -> np.ndarray:
    """The positions of the data file ``path`` that ``delete_file`` marks. (A deletion
    vector or an equality delete file never comes here: a version 3 table is not merged
    on read, and pyiceberg's planning refuses equality deletes.)"""
    from pyiceberg.io.pyarrow import _read_deletes

    positions = _read_deletes(io, delete_file).get(path)
    return np.empty(0, np.int64) if positions is None else positions.to_numpy().astype(np.int64)


def _union(parts: Iterable[np.ndarray]) -> np.ndarray:
    return np.unique(np.concatenate([np.empty(0, np.int64), *parts]))


def _written(io: Any, location: str, data_file: Any, positions: np.ndarray) -> Any:
    """A position delete file at ``location`` marking ``positions`` (sorted) of
    ``data_file``, with the statistics Iceberg's writers give one: bounds of both columns
    (the path's in full, so readers match it to its data file alone), counts and sizes."""
    from pyiceberg.conversions import to_bytes
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.types import LongType, StringType

    path = data_file.file_path
    rows = pa.table(
        [pa.array(np.full(len(positions), path, dtype=object), pa.string()), pa.array(positions)],
        schema=_SCHEMA,
    )
    output = io.new_output(location)
    with (
        output.create(overwrite=False) as stream,
        pq.ParquetWriter(stream, _SCHEMA, compression="zstd") as writer,
    ):
        writer.write_table(rows)
    footer = writer.writer.metadata
    sizes = {_PATH_ID: 0, _POS_ID: 0}
    for group in range(footer.num_row_groups):
        for column, field_id in ((0, _PATH_ID), (1, _POS_ID)):
            sizes[field_id] += footer.row_group(group).column(column).total_compressed_size
    count = len(positions)
    low, high = int(positions[0]), int(positions[-1])
    written = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=data_file.partition,
        record_count=count,
        file_size_in_bytes=len(output),
        column_sizes=sizes,
        value_counts={_PATH_ID: count, _POS_ID: count},
        null_value_counts={_PATH_ID: 0, _POS_ID: 0},
        nan_value_counts={},
        lower_bounds={_PATH_ID: to_bytes(StringType(), path), _POS_ID: to_bytes(LongType(), low)},
        upper_bounds={
            _PATH_ID: to_bytes(StringType(), path),
            _POS_ID: to_bytes(LongType(), high),
        },
        key_metadata=None,
        split_offsets=None,
        equality_ids=None,
        sort_order_id=None,
    )
    written.spec_id = data_file.spec_id  # not a field of the file's entry: set apart
    return written


def row_delta(transaction: Any, io: Any, properties: dict[str, str]) -> Any:
    """pyiceberg's overwrite producer for ``transaction``, which also adds position delete
    files and removes delete files (``RowDelta``)."""
    from pyiceberg.manifest import (
        ManifestContent,
        ManifestEntry,
        ManifestEntryStatus,
        ManifestWriterV2,
    )
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    class _DeleteManifestWriter(ManifestWriterV2):
        """A version 2 manifest of delete files: pyiceberg's declares data content."""

        def content(self) -> ManifestContent:
            return ManifestContent.DELETES

        @property
        def _meta(self) -> dict[str, str]:
            return {**super()._meta, "content": "deletes"}

    class RowDelta(_OverwriteFiles):
        """An ``overwrite`` snapshot (``delete`` when it only marks rows deleted) that,
        besides pyiceberg's added and removed data files, adds the delete files of
        ``mark`` and removes those they replace, in one delete manifest per partition
        spec; a delete manifest holding a removed one is written again without it. A
        data file marked holds one of the batch's keys, so another writer removing it in
        between is a conflict by pyiceberg's own check (``delete_by_predicate``)."""

        def __init__(self) -> None:
            has_snapshot = transaction.table_metadata.current_snapshot() is not None
            super().__init__(
                operation=Operation.OVERWRITE if has_snapshot else Operation.APPEND,
                transaction=transaction,
                io=io,
                snapshot_properties=properties,
            )
            self._new_deletes: list[Any] = []
            self._old_deletes: set[Any] = set()
            self._old_entries: list[Any] = []

        def mark(self, marks: Iterable[Marked]) -> None:
            for m in marks:
                self._new_deletes.append(m.deletes)
                self._old_deletes.update(m.replaced)

        def retire(self, delete_files: Iterable[Any]) -> None:
            """Remove ``delete_files`` (those of data files this snapshot removes)."""
            self._old_deletes.update(delete_files)

        def _existing_manifests(self) -> list[Any]:
            kept = super()._existing_manifests()
            if not self._old_deletes:
                return kept
            self._old_entries = []
            manifests = []
            for manifest in kept:
                if manifest.content != ManifestContent.DELETES:
                    manifests.append(manifest)
                    continue
                entries = manifest.fetch_manifest_entry(io=self._io, discard_deleted=True)
                gone = [e for e in entries if e.data_file in self._old_deletes]
                if not gone:
                    manifests.append(manifest)
                    continue
                self._old_entries += gone
                left = [e for e in entries if e.data_file not in self._old_deletes]
                if left:
                    with self._writer(manifest.partition_spec_id) as writer:
                        for entry in left:
                            writer.existing(entry)
                    manifests.append(writer.to_manifest_file())
            return manifests

        def _manifests(self) -> list[Any]:
            manifests: list[Any] = super()._manifests()  # fills _old_entries
            by_spec: dict[int, list[tuple[bool, Any]]] = {}  # (added, entry)
            for delete_file in self._new_deletes:
                entry = ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED,
                    snapshot_id=self._snapshot_id,
                    sequence_number=None,
                    file_sequence_number=None,
                    data_file=delete_file,
                )
                by_spec.setdefault(delete_file.spec_id, []).append((True, entry))
            for entry in self._old_entries:
                by_spec.setdefault(entry.data_file.spec_id, []).append((False, entry))
            for spec_id, entries in by_spec.items():
                with self._writer(spec_id) as writer:
                    for added, entry in entries:
                        writer.add_entry(entry) if added else writer.delete(entry)
                manifests.append(writer.to_manifest_file())
            return manifests

        def _writer(self, spec_id: int) -> Any:
            return _DeleteManifestWriter(
                self.spec(spec_id),
                self.schema(),
                self.new_manifest_output(),
                self._snapshot_id,
                self._compression,
            )

        def _summary(self, snapshot_properties: Any = None) -> Any:
            """pyiceberg's summary, counting the delete files added and removed too."""
            added, removed = self._added_data_files, self._deleted_data_files
            if not added and not removed and self._new_deletes:
                self._operation = Operation.DELETE
            self._added_data_files = added + self._new_deletes
            self._deleted_data_files = removed | self._old_deletes
            try:
                return super()._summary(snapshot_properties or {})
            finally:
                self._added_data_files, self._deleted_data_files = added, removed

    return RowDelta()
