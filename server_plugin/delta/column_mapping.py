"""Column mapping (``delta.columnMapping.mode`` ``name`` or ``id``): data files name their
columns by physical names (or field ids) that stay fixed when a column is renamed or
dropped, while the schema gives the logical names users see.

Files are read by physical name (or field id, matched in the file's parquet field ids) at
every nesting level, cast to the physical form of the logical type (missing fields NULL),
then relabelled to logical names by an Arrow ``view`` (no copy). Partition values in the
log are keyed by physical names. A rename keeps the physical name, so files written before
it read under the new name; a dropped column is simply not asked for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

PHYSICAL_NAME = "delta.columnMapping.physicalName"
FIELD_ID = "delta.columnMapping.id"
PARQUET_FIELD_ID = b"PARQUET:field_id"


def mapping_mode(configuration: dict[str, Any] | None) -> str:
    return str((configuration or {}).get("delta.columnMapping.mode", "none")).lower()


@dataclass(frozen=True)
class Node:
    """The mapping of one type: struct fields (logical name, physical name, field id, type
    node), a list's element, or a map's key and value; a leaf has none of them."""

    fields: tuple[tuple[str, str, int | None, Node], ...] = ()
    element: Node | None = None
    key: Node | None = None
    value: Node | None = None


LEAF = Node()


def _node(data_type: Any) -> Node:
    if not isinstance(data_type, dict):
        return LEAF
    kind = data_type.get("type")
    if kind == "struct":
        return Node(fields=tuple(_field(f) for f in data_type["fields"]))
    if kind == "array":
        return Node(element=_node(data_type["elementType"]))
    if kind == "map":
        return Node(key=_node(data_type["keyType"]), value=_node(data_type["valueType"]))
    return LEAF


def _field(field: dict[str, Any]) -> tuple[str, str, int | None, Node]:
    metadata = field.get("metadata") or {}
    physical = str(metadata.get(PHYSICAL_NAME, field["name"]))
    field_id = metadata.get(FIELD_ID)
    return (
        field["name"],
        physical,
        None if field_id is None else int(field_id),
        _node(field["type"]),
    )


@dataclass(frozen=True)
class ColumnMapping:
    """How to find a table's logical columns in its data files."""

    mode: str  # "name" or "id"
    root: Node

    @classmethod
    def of(cls, schema_string: str, configuration: dict[str, Any] | None) -> ColumnMapping | None:
        mode = mapping_mode(configuration)
        if mode == "none":
            return None
        return cls(mode, _node(json.loads(schema_string)))

    def physical_name(self, logical: str) -> str:
        for name, physical, _, _ in self.root.fields:
            if name == logical:
                return physical
        return logical

    def file_columns(self, file_schema: pa.Schema) -> dict[str, tuple[str, pa.DataType | None]]:
        """For each logical top-level column found in the file: the file's column name and
        its type there."""
        found: dict[str, tuple[str, pa.DataType | None]] = {}
        for name, physical, field_id, _ in self.root.fields:
            match = _find(list(file_schema), physical, field_id, self.mode)
            if match is not None:
                found[name] = (match.name, match.type)
        return found

    def read_as(self, column: pa.Array, logical: pa.DataType, name: str) -> pa.Array:
        """A column read from a file as the logical type: cast to the physical form, then
        relabelled. Raises what ``cast`` raises when the types do not fit."""
        node = next((n for lname, _, _, n in self.root.fields if lname == name), LEAF)
        physical = _physical_type(logical, node, column.type, self.mode)
        if column.type != physical:
            column = column.cast(physical)
        return column.view(logical) if physical != logical else column


def _find(
    fields: list[pa.Field], physical: str, field_id: int | None, mode: str
) -> pa.Field | None:
    if mode == "id" and field_id is not None:
        for field in fields:
            metadata = field.metadata or {}
            if metadata.get(PARQUET_FIELD_ID) == str(field_id).encode():
                return field
    return next((f for f in fields if f.name == physical), None)


def _physical_type(
    logical: pa.DataType, node: Node, in_file: pa.DataType | None, mode: str
) -> pa.DataType:
    """``logical`` with every struct field named as the file names it."""
    if pa.types.is_struct(logical) and node.fields:
        file_fields = list(in_file) if in_file is not None and pa.types.is_struct(in_file) else []
        children = []
        for index, (_, physical, field_id, child) in enumerate(node.fields):
            target = logical.field(index)
            match = _find(file_fields, physical, field_id, mode)
            child_type = _physical_type(target.type, child, match and match.type, mode)
            children.append(
                pa.field(match.name if match else physical, child_type, target.nullable)
            )
        return pa.struct(children)
    if pa.types.is_list(logical) and node.element is not None:
        inner = in_file.value_type if in_file is not None and pa.types.is_list(in_file) else None
        value = logical.value_field
        element = _physical_type(value.type, node.element, inner, mode)
        return pa.list_(pa.field(value.name, element, value.nullable))
    if pa.types.is_map(logical) and node.key is not None and node.value is not None:
        in_map = in_file if in_file is not None and pa.types.is_map(in_file) else None
        key_type = in_map.key_type if in_map is not None else None
        key = _physical_type(logical.key_type, node.key, key_type, mode)
        item_type = in_map.item_type if in_map is not None else None
        item = _physical_type(logical.item_type, node.value, item_type, mode)
        return pa.map_(key, item)
    return logical
