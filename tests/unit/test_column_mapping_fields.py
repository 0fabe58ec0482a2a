"""Column mapping (``server_plugin/delta/column_mapping.py``) on nested fields, without a
server; tables with column mapping, batch and streaming, are in
tests/server/test_column_mapping.py."""

from __future__ import annotations

import json
from typing import Any


def test_nested_fields_in_lists_and_maps_are_mapped_by_name_and_id() -> None:
    """Without a server: a file's physical struct fields inside a list and a map come back
    under logical names, found by physical name (name mode) or field id (id mode)."""
    import pyarrow as pa
    from spark_cdc.server_plugin.delta.column_mapping import ColumnMapping

    def field(name: str, kind: Any, number: int) -> dict[str, Any]:
        metadata = {
            "delta.columnMapping.id": number,
            "delta.columnMapping.physicalName": f"p{number}",
        }
        return {"name": name, "type": kind, "nullable": True, "metadata": metadata}

    inner = {"type": "struct", "fields": [field("a", "long", 2), field("b", "string", 3)]}
    schema = {
        "type": "struct",
        "fields": [
            field("items", {"type": "array", "elementType": inner, "containsNull": True}, 1),
            field(
                "lookup",
                {"type": "map", "keyType": "string", "valueType": inner, "valueContainsNull": True},
                4,
            ),
        ],
    }
    logical_inner = pa.struct([("a", pa.int64()), ("b", pa.string())])
    logical = {"items": pa.list_(logical_inner), "lookup": pa.map_(pa.string(), logical_inner)}

    def ids(number: int) -> dict[bytes, bytes]:
        return {b"PARQUET:field_id": str(number).encode()}

    for mode, names in [("name", ("p2", "p3")), ("id", ("x", "y"))]:
        # id mode: the file's own names differ; only the field ids say which is which
        struct = pa.struct(
            [
                pa.field(names[1], pa.string(), metadata=ids(3)),
                pa.field(names[0], pa.int64(), metadata=ids(2)),
            ]
        )
        file_schema = pa.schema(
            [
                pa.field("p1", pa.list_(struct), metadata=ids(1)),
                pa.field("p4", pa.map_(pa.string(), struct), metadata=ids(4)),
            ]
        )
        mapping = ColumnMapping.of(json.dumps(schema), {"delta.columnMapping.mode": mode})
        assert mapping is not None
        assert {k: v[0] for k, v in mapping.file_columns(file_schema).items()} == {
            "items": "p1",
            "lookup": "p4",
        }
        value = {names[1]: "s", names[0]: 7}
        items = pa.array([[value], None], file_schema.field("p1").type)
        lookup = pa.array([[("k", value)], []], file_schema.field("p4").type)
        got_items = mapping.read_as(items, logical["items"], "items")
        got_lookup = mapping.read_as(lookup, logical["lookup"], "lookup")
        assert got_items.type == logical["items"]
        assert got_items.to_pylist() == [[{"a": 7, "b": "s"}], None]
        assert got_lookup.type == logical["lookup"]
        assert got_lookup.to_pylist() == [[("k", {"a": 7, "b": "s"})], []]
