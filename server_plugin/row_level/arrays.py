"""The Arrow and numpy helpers that equality and hashing read arrays with.

Arrays cross between numpy and Arrow through their buffers (``arrow_types``): neither the
plugin nor the passes import pandas (tests/unit/test_source_row_level.py says why).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.arrow_types import to_numpy


def array(data: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(data, pa.ChunkedArray):
        return data.combine_chunks() if data.num_chunks != 1 else data.chunk(0)
    return data


def plain(column: pa.Array) -> pa.Array:
    """Dictionary and extension arrays as their values; maps as lists of entries (a map's
    JSON keeps its entry order, so two maps are equal when their entry lists are)."""
    if isinstance(column, pa.ExtensionArray):
        column = column.storage
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if pa.types.is_map(column.type):
        mask = column.is_null() if column.null_count else None
        column = pa.ListArray.from_arrays(column.offsets, column.values, mask=mask)
    return column


def valid(column: pa.Array) -> np.ndarray:
    if not column.null_count:
        return np.ones(len(column), bool)
    return to_numpy(column.is_valid())


def is_list(data_type: pa.DataType) -> bool:
    return (
        pa.types.is_list(data_type)
        or pa.types.is_large_list(data_type)
        or pa.types.is_fixed_size_list(data_type)
        or pa.types.is_map(data_type)
    )


def list_lengths(column: pa.Array) -> np.ndarray:
    lengths = to_numpy(pc.list_value_length(column)).astype(np.int64)
    if column.null_count:  # a NULL list holds no elements
        lengths[~valid(column)] = 0
    return lengths


def flat_values(column: pa.Array) -> pa.Array:
    """The elements of every non-NULL list, in order (a NULL list holds none)."""
    return pc.list_flatten(column)


def list_parents(lengths: np.ndarray) -> np.ndarray:
    """The list each flattened element belongs to (NULL lists hold none, as flattened)."""
    return np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)


def fixed_values(column: pa.Array, width: int) -> np.ndarray:
    """The values of an integer-like array as int64 (a NULL's slot holds any value: the
    callers mask NULLs)."""
    if pa.types.is_boolean(column.type):
        return to_numpy(column).astype(np.int64)
    signed = {1: pa.int8(), 2: pa.int16(), 4: pa.int32(), 8: pa.int64()}[width]
    return to_numpy(column.view(signed)).astype(np.int64)


def integer_width(data_type: pa.DataType) -> int | None:
    if (
        pa.types.is_integer(data_type)
        or pa.types.is_temporal(data_type)
        or pa.types.is_boolean(data_type)
    ) and not pa.types.is_interval(data_type):
        return 1 if pa.types.is_boolean(data_type) else data_type.bit_width // 8
    return None


def ordered_integers(column: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
    """A column's values as int64 that order as the column does: signed integers, dates
    and timestamps without NULLs (None for any other column)."""
    data = array(column)
    width = None if data.null_count else integer_width(data.type)
    if width is None or pa.types.is_unsigned_integer(data.type) or pa.types.is_boolean(data.type):
        return None
    return fixed_values(data, width)
