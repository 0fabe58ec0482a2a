"""Delta tables with deletion vectors, written by hand following the protocol ("Deletion
Vector Format"): deltalake 1.6.6 reads deletion vectors but cannot write them. Bitmaps are
serialized by pyroaring; data files by pyarrow; commits by ``append_commit``. delta-rs
reading these tables (snapshots, ``load_cdf``) is the check that they follow the protocol.
"""

from __future__ import annotations

import json
import struct
import uuid
import zlib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, QueryBuilder, write_deltalake
from pyroaring import BitMap

from tests.support.delta_tables import CDF, append_commit, commit_file, rows

MAGIC = 1681511377
Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
DV_PROTOCOL = {
    "minReaderVersion": 3,
    "minWriterVersion": 7,
    "readerFeatures": ["deletionVectors"],
    "writerFeatures": ["deletionVectors", "changeDataFeed"],
}


def z85(data: bytes) -> str:
    padded = data + b"\0" * (-len(data) % 4)
    out = []
    for (word,) in struct.iter_unpack(">I", padded):
        out += [Z85[word // 85**k % 85] for k in (4, 3, 2, 1, 0)]
    return "".join(out)


def bitmap_array(positions: Iterable[int]) -> bytes:
    """Row positions as Delta's RoaringBitmapArray (magic, buckets, 32-bit bitmaps)."""
    buckets: dict[int, list[int]] = {}
    for position in sorted(set(positions)):
        buckets.setdefault(position >> 32, []).append(position & 0xFFFFFFFF)
    out = struct.pack("<Iq", MAGIC, len(buckets))
    for high, low in sorted(buckets.items()):
        bitmap = BitMap(low)
        bitmap.run_optimize()
        out += struct.pack("<I", high) + bitmap.serialize()
    return out


def deletion_vector(table: str, positions: Iterable[int], storage: str = "u") -> dict[str, Any]:
    """Write a DV (a file for ``u``/``p``, nothing for ``i``) and return its descriptor."""
    positions = sorted(set(positions))
    data = bitmap_array(positions)
    descriptor: dict[str, Any] = {"sizeInBytes": len(data), "cardinality": len(positions)}
    if storage == "i":
        return {**descriptor, "storageType": "i", "pathOrInlineDv": z85(data)}
    name = uuid.uuid4()
    prefix = "ab" if storage == "u" else ""
    folder = Path(table) / prefix
    folder.mkdir(exist_ok=True)
    file = folder / f"deletion_vector_{name}.bin"
    framed = struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    file.write_bytes(b"\x01" + framed)
    where = prefix + z85(name.bytes) if storage == "u" else file.resolve().as_uri()
    return {**descriptor, "storageType": storage, "pathOrInlineDv": where, "offset": 1}


class DvTable:
    """A table and the current add action of each of its files, for hand-written DML."""

    def __init__(self, path: str, data: pa.Table, partition_by: list[str] | None = None) -> None:
        self.path = path
        self.partition_by = partition_by or []
        write_deltalake(path, data, partition_by=partition_by, configuration=CDF)
        self.files: dict[str, dict[str, Any]] = {}
        for line in commit_file(path, 0).read_text().splitlines():
            if '"add"' in line:
                add = json.loads(line)["add"]
                self.files[add["path"]] = add
        metadata = _metadata(path)
        configuration = {**metadata["configuration"], "delta.enableDeletionVectors": "true"}
        append_commit(
            path,
            [{"protocol": DV_PROTOCOL}, {"metaData": {**metadata, "configuration": configuration}}],
            _info("SET TBLPROPERTIES"),
        )

    def file_rows(self, file: str) -> list[dict[str, Any]]:
        return pq.read_table(Path(self.path) / file).to_pylist()

    def file_where(self, column: str, value: Any) -> str:
        for file in self.files:
            if any(r.get(column) == value for r in self.file_rows(file)):
                return file
        for file, add in self.files.items():
            if add["partitionValues"].get(column) == str(value):
                return file
        raise AssertionError(f"no file holds {column}={value}")

    def deleted(self, file: str) -> set[int]:
        return set(self.files[file].get("deletionVector", {}).get("_rows", []))

    def commit(
        self,
        operation: str,
        marks: dict[str, Iterable[int]] | None = None,
        new_data: pa.Table | None = None,
        storage: str = "u",
        data_change: bool = True,
        removes: Iterable[str] = (),
        exact: bool = False,
        row_group_size: int | None = None,
    ) -> int:
        """One commit: ``marks`` adds row positions to files' DVs (``exact``: replaces
        them), ``new_data`` is a new file, ``removes`` drops files whole (DV and all)."""
        actions: list[dict[str, Any]] = []
        for file, more in (marks or {}).items():
            old = self.files[file]
            rows_now = set(more) if exact else self.deleted(file) | set(more)
            dv = deletion_vector(self.path, rows_now, storage)
            actions.append({"remove": _remove(old, data_change)})
            new = {**old, "dataChange": data_change, "deletionVector": dv}
            actions.append({"add": _public(new)})
            self.files[file] = {**new, "deletionVector": {**dv, "_rows": sorted(rows_now)}}
        for file in removes:
            actions.append({"remove": _remove(self.files.pop(file), data_change)})
        if new_data is not None:
            add = self.write_file(new_data, data_change, row_group_size)
            actions.append({"add": add})
            self.files[add["path"]] = add
        return append_commit(self.path, actions, _info(operation))

    def write_file(
        self, data: pa.Table, data_change: bool = True, row_group_size: int | None = None
    ) -> dict[str, Any]:
        values = {c: str(data.column(c)[0].as_py()) for c in self.partition_by}
        folder = "/".join(f"{c}={v}" for c, v in values.items())
        name = f"{folder + '/' if folder else ''}part-{uuid.uuid4()}.parquet"
        target = Path(self.path) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(data.drop_columns(self.partition_by), target, row_group_size=row_group_size)
        return {
            "path": name,
            "partitionValues": values,
            "size": target.stat().st_size,
            "modificationTime": 1_800_000_000_000,
            "dataChange": data_change,
            "stats": f'{{"numRecords":{data.num_rows}}}',
        }


def _public(add: dict[str, Any]) -> dict[str, Any]:
    """The action as written to the log (without the rows kept for the tests)."""
    dv = add.get("deletionVector")
    if dv is None:
        return add
    return {**add, "deletionVector": {k: v for k, v in dv.items() if k != "_rows"}}


def _remove(add: dict[str, Any], data_change: bool) -> dict[str, Any]:
    remove = {
        "path": add["path"],
        "deletionTimestamp": 1_800_000_000_000,
        "dataChange": data_change,
        "extendedFileMetadata": True,
        "partitionValues": add["partitionValues"],
        "size": add["size"],
    }
    if add.get("deletionVector") is not None:
        remove["deletionVector"] = _public(add)["deletionVector"]
    return remove


_clock = [1_800_000_000_000]


def _info(operation: str) -> dict[str, Any]:
    _clock[0] += 1000
    return {"timestamp": _clock[0], "operation": operation}


def _metadata(path: str) -> dict[str, Any]:
    for line in commit_file(path, 0).read_text().splitlines():
        if '"metaData"' in line:
            return dict(json.loads(line)["metaData"])
    raise AssertionError("no metaData")


def rs_snapshot(path: str, version: int, columns: list[str]) -> Counter[tuple[Any, ...]]:
    """The table's rows at ``version`` as delta-rs reads them (DVs and column mapping
    applied), as a multiset; missing columns NULL."""
    reader = QueryBuilder().register("t", DeltaTable(path, version=version))
    table = pa.RecordBatchReader.from_stream(reader.execute("select * from t")).read_all()
    present = set(table.column_names)
    return Counter(
        tuple(r.get(c) if c in present else None for c in columns) for r in table.to_pylist()
    )


def dv_rows(ids: Iterable[int], tag: str = "a", part: str | None = None) -> pa.Table:
    return rows(ids, tag, part)
