"""Data files written with pyarrow, carrying the statistics delta-rs gives its own: the
files apply writes into a target and its state (rewritten and new), where delta-rs'
writer was most of what a batch cost.

delta-rs decodes every column it is handed and tries a dictionary for each; here a column
read dictionary-coded is written from its dictionary as read, and a dictionary is tried
only where one pays (the file being rewritten had one; a new file's text, not its keys or
floating-point numbers). Measured on a row group of a million rows of the bench's target:
0.19 s by delta-rs, 0.08 s here.

A file's statistics (``numRecords``, ``minValues``, ``maxValues``, ``nullCount`` of its
first 32 columns) come from the Parquet footer just written, formatted as delta-rs
formats them (strings over 64 bytes cut to a lower bound and an upper one, timestamps to
the millisecond), so a reader skips files alike whoever wrote them; a test compares them
with delta-rs' on random rows. Only flat schemas of the types below take this path, and
only tables whose statistics columns are the default (``writes``): the rest go to
delta-rs as before.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

# The table properties that choose other statistics columns than the first 32.
STATS_PROPERTIES = ("delta.dataSkippingNumIndexCols", "delta.dataSkippingStatsColumns")
_INDEXED_COLUMNS = 32
# The rows of a new file at most (about 100 MB of the bench's rows, delta-rs' file size).
FILE_ROWS = 1 << 23
_TRUNCATE_BYTES = 64  # delta-rs' Parquet writer cuts text statistics at this length


def writes(schema: pa.Schema, configuration: Mapping[str, str]) -> bool:
    """Whether files of ``schema`` (a table's data columns) are written here: every
    column of a type below and the table's statistics columns its first 32."""
    if any(k in configuration for k in STATS_PROPERTIES):
        return False
    return all(_supported(_value_type(f.type)) for f in schema)


def write(
    root: str,
    folder: str,
    rows: pa.Table,
    partition_values: Mapping[str, str | None],
    dictionary: Collection[str],
) -> dict[str, Any]:
    """``rows`` (data columns only) as a new Parquet file in ``folder`` (relative to the
    table's ``root``, URL-encoded as the table's add actions name it): its add action,
    ``dictionary`` the columns dictionary-coded."""
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    relative = f"{folder}/{name}" if folder else name
    directory = os.path.join(root, unquote(folder))
    os.makedirs(directory, exist_ok=True)
    location = os.path.join(directory, name)
    footers: list[pq.FileMetaData] = []
    pq.write_table(
        rows,
        location,
        compression="snappy",
        use_dictionary=[n for n in rows.column_names if n in dictionary],
        store_schema=False,  # readers take the columns' types from the table, not a dictionary
        metadata_collector=footers,
    )
    status = os.stat(location)
    return {
        "path": relative,
        "partitionValues": dict(partition_values),
        "size": status.st_size,
        "modificationTime": status.st_mtime_ns // 1_000_000,
        "dataChange": True,
        "stats": statistics(footers[0], rows.schema),
    }


def new_file_dictionary(schema: pa.Schema, keys: Collection[str]) -> set[str]:
    """The columns of a new file worth a dictionary: every column but the keys (unique
    in a target) and floating-point numbers (seldom repeated), whose dictionary would be
    built and thrown away."""
    return {
        f.name
        for f in schema
        if f.name not in keys and not pa.types.is_floating(_value_type(f.type))
    }


def statistics(footer: pq.FileMetaData, schema: pa.Schema) -> str:
    """The Delta statistics of a file of ``schema`` from its Parquet ``footer``."""
    lows: dict[str, Any] = {}
    highs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for index, field in enumerate(list(schema)[:_INDEXED_COLUMNS]):
        kind = _value_type(field.type)
        groups = [
            footer.row_group(g).column(index).statistics for g in range(footer.num_row_groups)
        ]
        if any(s is None or not s.has_null_count for s in groups):
            continue
        nulls[field.name] = sum(s.null_count for s in groups)
        valued = [s for s in groups if s.num_values]  # an all-NULL row group bounds nothing
        if valued and all(s.has_min_max for s in valued):
            low = min(s.min_raw for s in valued)  # text as its bytes, which order as UTF-8
            high = max(s.max_raw for s in valued)
            if _finite(low) and _finite(high):
                lows[field.name] = _lower(low, kind)
                highs[field.name] = _upper(high, kind)
    described = {
        "numRecords": footer.num_rows,
        "minValues": lows,
        "maxValues": highs,
        "nullCount": nulls,
    }
    return json.dumps(described, separators=(",", ":"))


def _supported(kind: pa.DataType) -> bool:
    return (
        pa.types.is_signed_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_date32(kind)
        or (pa.types.is_timestamp(kind) and kind.unit == "us" and kind.tz in (None, "UTC"))
    ) and not pa.types.is_float16(kind)


def _value_type(kind: pa.DataType) -> pa.DataType:
    return kind.value_type if pa.types.is_dictionary(kind) else kind


def _finite(value: Any) -> bool:
    return not isinstance(value, float) or bool(np.isfinite(value))


def _lower(value: Any, kind: pa.DataType) -> Any:
    if isinstance(value, bytes):
        return _cut(value.decode())
    return _formatted(value, kind)


def _upper(value: Any, kind: pa.DataType) -> Any:
    if isinstance(value, bytes):
        text = value.decode()
        cut = _cut(text)
        if cut == text:
            return text
        raised = _raised(cut)
        return text if raised is None else raised
    return _formatted(value, kind)


def _formatted(value: Any, kind: pa.DataType) -> Any:
    """A number, or a date or timestamp as delta-rs writes it: a timestamp cut to the
    millisecond, as the Delta protocol's statistics are, a whole second's without a
    fraction, UTC's in ``Z``, one without a time zone with a space."""
    if pa.types.is_date32(kind):
        return str(np.datetime64(int(value), "D"))
    if pa.types.is_timestamp(kind):
        micros = int(value)
        whole = micros % 1_000_000 == 0  # written without a fraction
        text = str(
            np.datetime64(micros // 1_000_000, "s")
            if whole
            else np.datetime64(micros // 1000, "ms")
        )
        return f"{text}Z" if kind.tz else text.replace("T", " ")
    if pa.types.is_boolean(kind):
        return bool(value)
    return value


def _cut(text: str) -> str:
    """``text``'s longest prefix of at most 64 bytes in UTF-8 (a lower bound of it)."""
    encoded = text.encode()
    if len(encoded) <= _TRUNCATE_BYTES:
        return text
    return encoded[:_TRUNCATE_BYTES].decode(errors="ignore")


def _raised(prefix: str) -> str | None:
    """The shortest string above every string starting with ``prefix``: its last
    character that has a successor of the same UTF-8 length, raised, and what follows it
    dropped (None: none has one)."""
    for at in range(len(prefix) - 1, -1, -1):
        code = ord(prefix[at]) + 1
        if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:  # no character (as delta-rs)
            continue
        if len(chr(code).encode()) == len(prefix[at].encode()):
            return prefix[:at] + chr(code)
    return None
