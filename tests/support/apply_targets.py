"""Reading what ``apply_changes`` wrote, as delta-rs' query engine reads it (deletion vectors
and column mapping applied; its pyarrow dataset can abort the process at exit), with
Arrow's plain types (the engine answers strings as string views)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder


def _plain(data_type: pa.DataType) -> pa.DataType:
    if pa.types.is_string_view(data_type) or pa.types.is_large_string(data_type):
        return pa.string()
    if pa.types.is_binary_view(data_type) or pa.types.is_large_binary(data_type):
        return pa.binary()
    if pa.types.is_struct(data_type):
        return pa.struct([f.with_type(_plain(f.type)) for f in data_type])
    return data_type


def read_table(path: str) -> pa.Table:
    reader = QueryBuilder().register("t", DeltaTable(path)).execute("select * from t")
    table = pa.RecordBatchReader.from_stream(reader).read_all()
    return table.cast(pa.schema([pa.field(f.name, _plain(f.type)) for f in table.schema]))


def sorted_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Whole rows in one order: by every column's text (NULLs first)."""
    return sorted(table.to_pylist(), key=lambda r: [(v is not None, str(v)) for v in r.values()])
