"""The rows of a data file that delete files remove, as sorted row positions: read when a
task reads the file, vectorized.

- Position delete files (Parquet or ORC) list (file path, position) pairs for any number of
  data files: the positions whose path is the data file's, compared after the FileIO's
  ``map_location`` when it has one (``relocated_io``: a writer may spell one place two ways).
- Deletion vectors (v3) are Puffin blobs, one per data file: the blob at the entry's offset.
- Equality delete files hold rows of some columns (``equality_ids``): every row of the data
  file equal to one of them on those columns is deleted, NULL equal to NULL. The data file's
  columns are read by field id (a column added later reads as its default or NULL, one
  dropped since is still matched), and the pairs are matched by exact, NULL-safe groups
  (``row_level.rules.group_rows``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from spark_cdc.server_plugin.arrow_types import to_numpy
from spark_cdc.server_plugin.changefeed.roaring import roaring64_positions
from spark_cdc.server_plugin.iceberg.changes import EQUALITY_DELETES
from spark_cdc.server_plugin.iceberg.manifests import FileEntry
from spark_cdc.server_plugin.row_level.rules import group_rows

_NONE = np.empty(0, np.int64)


class DeleteReader:
    """Reads delete files for one task, each once however many sets name it."""

    def __init__(self, io: Any, metadata: Any) -> None:
        self.io, self.metadata = io, metadata
        self._mapped = getattr(io, "map_location", lambda location: location)
        self._positions: dict[tuple[Any, ...], dict[str, np.ndarray]] = {}
        self._keys: dict[tuple[int, ...], pa.Table] = {}

    def dead(self, data: FileEntry, deletes: tuple[FileEntry, ...]) -> np.ndarray:
        """The sorted positions of ``data``'s rows that ``deletes`` remove."""
        found = [self._dead(data, d) for d in deletes]
        return np.unique(np.concatenate(found)) if found else _NONE

    def _dead(self, data: FileEntry, delete: FileEntry) -> np.ndarray:
        if delete.content == EQUALITY_DELETES:
            return self._equal(data, delete)
        by_path = self._positions.get(delete.key)
        if by_path is None:
            by_path = self._read_positions(delete)
            self._positions[delete.key] = by_path
        return by_path.get(self._mapped(data.path), _NONE)

    def _read_positions(self, delete: FileEntry) -> dict[str, np.ndarray]:
        from pyiceberg.manifest import FileFormat

        fmt = delete.data_file.file_format
        if fmt == FileFormat.PUFFIN:
            return {self._mapped(delete.referenced_data_file or ""): self._vector(delete)}
        with self.io.new_input(delete.path).open(seekable=True) as stream:
            if fmt == FileFormat.PARQUET:
                import pyarrow.parquet as pq

                table = pq.read_table(stream, columns=["file_path", "pos"])
            elif fmt == FileFormat.ORC:
                import pyarrow.orc as orc

                table = orc.read_table(stream, columns=["file_path", "pos"])
            else:
                raise ValueError(f"position delete files in {fmt} are not supported")
        paths = table.column("file_path").combine_chunks().dictionary_encode()
        positions = to_numpy(table.column("pos")).astype(np.int64)
        codes = to_numpy(paths.indices)
        return {
            self._mapped(path): np.sort(positions[codes == index])
            for index, path in enumerate(paths.dictionary.to_pylist())
        }

    def _vector(self, delete: FileEntry) -> np.ndarray:
        """A deletion vector's positions: the blob at the entry's offset, decoded with
        pyiceberg's reader of the whole Puffin file when the offset is not recorded."""
        from pyiceberg.table.puffin import PuffinFile

        with self.io.new_input(delete.path).open(seekable=True) as stream:
            payload = stream.read()
        for blob in PuffinFile(payload).footer.blobs:
            if delete.content_offset is None or blob.offset == delete.content_offset:
                referenced = blob.properties.get("referenced-data-file")
                if delete.content_offset is not None or referenced == delete.referenced_data_file:
                    return _dv_positions(payload[blob.offset : blob.offset + blob.length])
        raise ValueError(f"no deletion vector for '{delete.referenced_data_file}' in the file")

    def _equal(self, data: FileEntry, delete: FileEntry) -> np.ndarray:
        ids = tuple(delete.data_file.equality_ids or ())
        if not ids:
            raise ValueError("the equality delete file names no equality_ids")
        removed = self._read_columns(delete, ids)
        if not removed.num_rows:
            return _NONE
        present = self._keys.get(ids)
        if present is None:
            present = self._read_columns(data, ids)
            self._keys[ids] = present
        count = removed.num_rows
        keys = []
        for index in range(len(ids)):
            column = present.column(index).combine_chunks()
            gone = removed.column(index).combine_chunks()
            if gone.type != column.type:
                gone = gone.cast(column.type)
            keys.append(pa.concat_arrays([gone, column]))
        groups = group_rows(keys, "key")
        hit = np.zeros(groups.count, bool)
        hit[groups.ids[:count]] = True
        return np.flatnonzero(hit[groups.ids[count:]]).astype(np.int64)

    def _read_columns(self, entry: FileEntry, ids: tuple[int, ...]) -> pa.Table:
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io.pyarrow import ArrowScan
        from pyiceberg.schema import Schema
        from pyiceberg.table import FileScanTask

        fields = [field_by_id(self.metadata, i) for i in ids]
        scan = ArrowScan(self.metadata, self.io, Schema(*fields), AlwaysTrue())
        return scan.to_table([FileScanTask(entry.data_file)])


def field_by_id(metadata: Any, field_id: int) -> Any:
    """A column by field id in the newest schema that has it: an equality delete may name a
    column dropped since."""
    for schema in sorted(metadata.schemas, key=lambda s: -s.schema_id):
        try:
            return schema.find_field(field_id)
        except ValueError:
            continue
    raise ValueError(f"no schema of the table has field id {field_id}")


def _dv_positions(blob: bytes) -> np.ndarray:
    """A ``deletion-vector-v1`` blob: a 4-byte big-endian length, the magic ``D1 D3 39 64``,
    a portable 64-bit roaring bitmap, a CRC-32. The bitmap is Delta's format too."""
    length = int.from_bytes(blob[:4], "big")
    if blob[4:8] != b"\xd1\xd3\x39\x64":
        raise ValueError("the deletion vector's magic bytes are wrong")
    return roaring64_positions(blob[: 4 + length], 8).astype(np.int64)
