"""A 64-bit hash of each row, in numpy: rows that ``equality`` finds equal under a mode
("image" or "key") hash alike. Grouping by it (``rules.group_rows``) checks every group
value by value after, so a collision costs time, never a wrong group.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.arrow_types import to_numpy
from spark_cdc.server_plugin.row_level.arrays import (
    fixed_values,
    flat_values,
    integer_width,
    is_list,
    list_lengths,
    list_parents,
    plain,
    valid,
)

# Hashing constants (splitmix64's); numpy wraps uint64 arithmetic on arrays silently.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_NULL = np.uint64(0x5BD1E9955BD1E995)
_CANONICAL_NAN = {64: 0x7FF8000000000000, 32: 0x7FC00000, 16: 0x7E00}


def rows_hash(columns: Sequence[pa.Array], mode: str, seed: int = 0) -> np.ndarray:
    """A 64-bit hash of each row of ``columns``: rows equal under ``mode`` hash alike."""
    hashed = np.full(len(columns[0]), seed + 1, np.uint64) * _GOLDEN
    for column in columns:
        hashed = _combine(hashed, column_hash(column, mode))
    return hashed


def column_hash(column: pa.Array, mode: str) -> np.ndarray:
    column = plain(column)
    data_type = column.type
    n = len(column)
    if pa.types.is_null(data_type):
        return np.full(n, _NULL, np.uint64)
    if pa.types.is_floating(data_type):
        hashed = mix(_float_bits(column, mode).astype(np.uint64))
    elif pa.types.is_struct(data_type):
        hashed = np.full(n, _GOLDEN, np.uint64)
        for index in range(data_type.num_fields):
            hashed = _combine(hashed, column_hash(column.field(index), mode))
    elif is_list(data_type):
        hashed = _list_hash(column, mode)
    elif _is_bytes(data_type):
        hashed = _bytes_hash(column)
    elif pa.types.is_decimal(data_type) or pa.types.is_fixed_size_binary(data_type):
        width = data_type.byte_width
        raw = np.frombuffer(column.buffers()[1], np.uint8)
        words = raw[column.offset * width : (column.offset + n) * width].reshape(n, width)
        hashed = np.full(n, _GOLDEN, np.uint64)
        for start in range(0, width, 8):
            chunk = words[:, start : start + 8]
            padded = np.zeros((n, 8), np.uint8)
            padded[:, : chunk.shape[1]] = chunk
            hashed = _combine(hashed, padded.view(np.uint64).reshape(-1))
    else:
        width = integer_width(data_type)
        if width is None:
            raise TypeError(f"cannot compare values of type {data_type}")
        hashed = mix(fixed_values(column, width).view(np.uint64))
    if column.null_count:
        hashed = np.where(valid(column), hashed, _NULL)
    return hashed


def _list_hash(column: pa.Array, mode: str) -> np.ndarray:
    lengths = list_lengths(column)
    hashed = mix(lengths.astype(np.uint64) + _GOLDEN)
    values = flat_values(column)
    if not len(values):
        return hashed
    parents = list_parents(lengths)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    positions = np.arange(len(values), dtype=np.uint64) - starts[parents].astype(np.uint64)
    element = mix(column_hash(values, mode) ^ mix(positions + _MIX1))
    filled = np.flatnonzero(lengths > 0)
    sums = np.add.reduceat(element, starts[filled]) if len(filled) else element[:0]
    out = hashed.copy()
    out[filled] = _combine(hashed[filled], sums)
    return out


def _bytes_hash(column: pa.Array) -> np.ndarray:
    """A polynomial hash of each value's bytes, mixed with its length, in numpy; computed
    once per distinct value when values repeat (statuses, regions, codes: hashing every
    byte of every row costs ten times Arrow's dictionary pass). A NULL's slot holds any
    value: the caller masks NULLs."""
    if pa.types.is_string_view(column.type) or pa.types.is_binary_view(column.type):
        column = column.cast(pa.large_binary())
    if len(column) >= _DICTIONARY_MIN_ROWS:
        encoded = pc.dictionary_encode(column)
        distinct = encoded.dictionary
        if 0 < len(distinct) <= len(column) // 2:
            indices = to_numpy(encoded.indices.fill_null(0))
            return _each_bytes_hash(distinct)[indices]
    return _each_bytes_hash(column)


def _each_bytes_hash(column: pa.Array) -> np.ndarray:
    large = pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type)
    n = len(column)
    offsets = np.frombuffer(column.buffers()[1], np.int64 if large else np.int32)
    offsets = offsets[column.offset : column.offset + n + 1].astype(np.int64)
    lengths = np.diff(offsets)
    hashed = mix(lengths.astype(np.uint64) ^ _MIX2)
    total = int(offsets[-1] - offsets[0])
    if not total:
        return hashed
    data = column.buffers()[2]
    raw = np.frombuffer(data, np.uint8)[offsets[0] : offsets[-1]].astype(np.uint64)
    filled = np.flatnonzero(lengths > 0)
    starts = (offsets[:-1] - offsets[0])[filled]
    owner_start = np.repeat(starts, lengths[filled])
    positions = np.arange(total, dtype=np.int64) - owner_start
    powers = _powers(int(lengths.max()))
    sums = np.add.reduceat((raw + np.uint64(1)) * powers[positions], starts)
    hashed[filled] = _combine(hashed[filled], sums)
    return hashed


_POWERS = np.ones(1, np.uint64)
_DICTIONARY_MIN_ROWS = 4096


def _powers(length: int) -> np.ndarray:
    """Powers of an odd 64-bit constant, wrapping, cached and grown as needed."""
    global _POWERS
    if len(_POWERS) < length:
        grown = np.full(max(length, 2 * len(_POWERS)), _MIX2 | np.uint64(1), np.uint64)
        grown[0] = 1
        _POWERS = np.cumprod(grown, dtype=np.uint64)
    return _POWERS


def _is_bytes(data_type: pa.DataType) -> bool:
    return (
        pa.types.is_string(data_type)
        or pa.types.is_binary(data_type)
        or pa.types.is_large_string(data_type)
        or pa.types.is_large_binary(data_type)
        or pa.types.is_string_view(data_type)
        or pa.types.is_binary_view(data_type)
    )


def _float_bits(column: pa.Array, mode: str) -> np.ndarray:
    """A float array's bit patterns with every NaN made one NaN, and for keys ``-0.0`` made
    ``0.0`` (Spark normalizes floating grouping keys; ``to_json`` images keep the sign).
    A NULL's slot holds any value: the caller masks NULLs."""
    bits = column.type.bit_width
    values = to_numpy(column)
    if mode == "key":
        values = values + values.dtype.type(0.0)  # -0.0 + 0.0 == +0.0
    out = values.view({64: np.int64, 32: np.int32, 16: np.int16}[bits]).astype(np.int64)
    nan = np.isnan(values)
    if nan.any():
        out = np.where(nan, _CANONICAL_NAN[bits], out)
    return out


def mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, element-wise."""
    z = values.astype(np.uint64, copy=True)
    z ^= z >> np.uint64(30)
    z *= _MIX1
    z ^= z >> np.uint64(27)
    z *= _MIX2
    z ^= z >> np.uint64(31)
    return z


def _combine(hashed: np.ndarray, more: np.ndarray) -> np.ndarray:
    return mix(hashed * _GOLDEN + more)
