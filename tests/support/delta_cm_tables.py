"""Column-mapping tables written by hand following the protocol ("Column Mapping"):
deltalake 1.6.6 reads column mapping but cannot write it. Data files name columns by
physical name and carry field ids; the log's schema maps logical names to both."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tests.support.delta_tables import write_commit

PROTOCOL = {"minReaderVersion": 2, "minWriterVersion": 5}
PHYSICAL = "delta.columnMapping.physicalName"
FIELD_ID = "delta.columnMapping.id"
SPARK_TYPES = {"long": pa.int64(), "string": pa.string(), "double": pa.float64()}


class CmTable:
    """A table whose schema is a list of (logical name, Delta type JSON, id, physical)."""

    def __init__(self, path: str, mode: str) -> None:
        self.path, self.mode = Path(path), mode
        self.fields: list[dict[str, Any]] = []
        self.max_id = 0
        self.version = -1
        self.clock = 1_800_000_000_000
        (self.path / "_delta_log").mkdir(parents=True)
        self.table_id = str(uuid.uuid4())
        for name, kind in [("id", "long"), ("name", "string"), ("part", "string")]:
            self._new_field(name, kind)
        self._new_field(
            "info",
            {
                "type": "struct",
                "fields": [self._field("city", "string"), self._field("zip", "long")],
            },
        )
        self._commit([{"protocol": PROTOCOL}, {"metaData": self._metadata()}])

    def _field(self, name: str, kind: Any) -> dict[str, Any]:
        self.max_id += 1
        return {
            "name": name,
            "type": kind,
            "nullable": True,
            "metadata": {FIELD_ID: self.max_id, PHYSICAL: f"col-{uuid.uuid4()}"},
        }

    def _new_field(self, name: str, kind: Any) -> None:
        self.fields.append(self._field(name, kind))

    def _metadata(self) -> dict[str, Any]:
        return {
            "id": self.table_id,
            "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps({"type": "struct", "fields": self.fields}),
            "partitionColumns": ["part"],
            "configuration": {
                "delta.columnMapping.mode": self.mode,
                "delta.columnMapping.maxColumnId": str(self.max_id),
            },
            "createdTime": 1_800_000_000_000,
        }

    def _commit(self, actions: list[dict[str, Any]]) -> int:
        self.version += 1
        self.clock += 1000
        info = {"commitInfo": {"timestamp": self.clock, "operation": "MANUAL"}}
        lines = [json.dumps(a) for a in [info, *actions]]
        name = self.path / "_delta_log" / f"{self.version:020d}.json"
        write_commit(name, lines)
        return self.version

    def rename(self, old: str, new: str) -> int:
        next(f for f in self.fields if f["name"] == old)["name"] = new
        return self._commit([{"metaData": self._metadata()}])

    def drop(self, name: str) -> int:
        self.fields = [f for f in self.fields if f["name"] != name]
        return self._commit([{"metaData": self._metadata()}])

    def add_column(self, name: str, kind: str) -> int:
        self._new_field(name, kind)
        return self._commit([{"metaData": self._metadata()}])

    def _arrow(self, kind: Any) -> tuple[pa.DataType, Any]:
        if isinstance(kind, str):
            return SPARK_TYPES[kind], None
        children = [
            pa.field(
                f["metadata"][PHYSICAL],
                self._arrow(f["type"])[0],
                metadata={b"PARQUET:field_id": str(f["metadata"][FIELD_ID]).encode()},
            )
            for f in kind["fields"]
        ]
        return pa.struct(children), kind

    def _physical(self, kind: Any, value: Any) -> Any:
        if value is None or isinstance(kind, str):
            return value
        return {f["metadata"][PHYSICAL]: value.get(f["name"]) for f in kind["fields"]}

    def write_file(self, rows: list[dict[str, Any]], part: str) -> dict[str, Any]:
        fields, columns = [], []
        for field in self.fields:
            if field["name"] == "part":
                continue
            arrow_type, _ = self._arrow(field["type"])
            meta = {b"PARQUET:field_id": str(field["metadata"][FIELD_ID]).encode()}
            fields.append(pa.field(field["metadata"][PHYSICAL], arrow_type, metadata=meta))
            values = [self._physical(field["type"], r.get(field["name"])) for r in rows]
            columns.append(pa.array(values, arrow_type))
        name = f"part-{uuid.uuid4()}.parquet"
        pq.write_table(pa.Table.from_arrays(columns, schema=pa.schema(fields)), self.path / name)
        part_key = next(f for f in self.fields if f["name"] == "part")["metadata"][PHYSICAL]
        return {
            "path": name,
            "partitionValues": {part_key: part},
            "size": (self.path / name).stat().st_size,
            "modificationTime": self.clock,
            "dataChange": True,
        }

    def append(self, rows: list[dict[str, Any]], part: str = "p") -> tuple[int, dict[str, Any]]:
        add = self.write_file(rows, part)
        return self._commit([{"add": add}]), add

    def replace(self, old: dict[str, Any], rows: list[dict[str, Any]], part: str = "p") -> int:
        """A copy-on-write DELETE/UPDATE: the file goes, the rows kept come back."""
        add = self.write_file(rows, part)
        remove = {k: old[k] for k in ("path", "partitionValues", "size")}
        return self._commit([{"remove": {**remove, "dataChange": True}}, {"add": add}])
