"""Carry-over removal and update detection on a commit's rows, inside the source.

The rules are those of the client's plans (``spark_cdc.rewrite.row_level``), which follow
Spark's ``ResolveChangelogTable``; this module applies them to Arrow data with numpy and
pyarrow compute, never a Python loop over rows, so a source can hand Spark a resolved
feed and spare it the shuffle, aggregate and state of the client plan.

A *group* is one row id in one commit. With a row id, a group holding exactly one
``delete`` and one ``insert`` whose rows are equal in every data column is a carry-over
and is dropped whole; without a row id (``row_id=None``) a row's identity is its whole
content, so such a pair is simply an identical row removed and re-added. Update detection
relabels a remaining delete+insert pair ``update_preimage``/``update_postimage`` and fails
on a group with two deletes or two inserts. Equality is the client's:

- data columns are compared as Spark's ``to_json`` images compare them: NULL-safe, deep
  (structs, arrays, maps in entry order, binary), doubles by value except that ``-0.0``
  differs from ``0.0`` and every NaN equals every NaN, timestamps to the microsecond;
- row id columns are compared as Spark groups them: NULLs together, ``-0.0`` equal to
  ``0.0``, NaNs together (Spark normalizes floating keys), nested fields included.

Rows are grouped by a 64-bit hash of their key, and every group is then checked value by
value, so a hash collision can never merge two groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.arrow_types import FALSE, TRUE, from_numpy, text_array, to_numpy
from spark_cdc.server_plugin.errors import ChangelogSourceError
from spark_cdc.server_plugin.vocabulary import (
    CHANGE_TYPE,
    CHANGE_TYPES,
    COMMIT_VERSION,
    CONTRACT_VIOLATION,
    DELETE,
    INSERT,
    METADATA_COLUMNS,
    MULTIPLE_CHANGES_SENTENCE,
    UPDATE_POSTIMAGE,
    UPDATE_PREIMAGE,
)

# Arrays cross between numpy and Arrow through their buffers (arrow_types): neither the
# plugin nor the passes import pandas (tests/test_source_row_level.py says why).
_CODES = text_array(list(CHANGE_TYPES))
_INSERT, _DELETE = CHANGE_TYPES.index(INSERT), CHANGE_TYPES.index(DELETE)
_PREIMAGE, _POSTIMAGE = CHANGE_TYPES.index(UPDATE_PREIMAGE), CHANGE_TYPES.index(UPDATE_POSTIMAGE)

# Hashing constants (splitmix64's); numpy wraps uint64 arithmetic on arrays silently.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_NULL = np.uint64(0x5BD1E9955BD1E995)
_CANONICAL_NAN = {64: 0x7FF8000000000000, 32: 0x7FC00000, 16: 0x7E00}


@dataclass(frozen=True)
class RowLevelRules:
    """What to resolve. ``row_id`` holds column paths (``("key", "id")`` for ``key.id``) in
    the table's own spelling, or None: rows are identified by their whole content."""

    row_id: tuple[tuple[str, ...], ...] | None
    carryover_removal: bool
    update_detection: bool

    @property
    def any(self) -> bool:
        return self.carryover_removal or self.update_detection

    @property
    def key_names(self) -> set[str]:
        """The top-level columns the row id reads."""
        return {path[0] for path in self.row_id or ()}


def resolve(table: pa.Table, rules: RowLevelRules, version: int | None = None) -> pa.Table:
    """``table``'s rows (one or more whole commits) with the passes ``rules`` ask for.

    The output has ``table``'s schema; rows keep their order. Raises the client plan's
    contract violations as ``ChangelogSourceError``. ``_change_type`` holds labels, or
    codes (int8 indexes into ``CHANGE_TYPES``) and stays codes. A table without
    ``_commit_version`` holds one commit, ``version``: the source reads a commit that way
    and adds the version, the timestamp and the labels to the rows it keeps only.
    """
    if not table.num_rows or not rules.any:
        return table
    kinds = change_kinds(table.column(CHANGE_TYPE))
    is_delete, is_insert = kinds == _DELETE, kinds == _INSERT
    if not rules.update_detection and not (is_delete.any() and is_insert.any()):
        return table  # no group can hold a delete+insert pair
    keys = key_columns(table, rules.row_id)
    key_mode = "image" if rules.row_id is None else "key"
    versions = table.column(COMMIT_VERSION) if COMMIT_VERSION in table.column_names else None
    if versions is not None:
        span = pc.min_max(versions)
        if span["min"] != span["max"]:  # several commits: the version is part of the key
            keys = [*keys, _array(versions)]
    # Without a row id every data column is a key: the cheap fixed-width ones find the
    # groups, the check against each group's first row separates rows that differ elsewhere.
    cheap = [i for i, k in enumerate(keys) if _is_fixed(k.type)] if rules.row_id is None else None
    groups = group_rows(keys, key_mode, hashed=cheap or None)
    deletes = np.bincount(groups.ids[is_delete], minlength=groups.count)
    inserts = np.bincount(groups.ids[is_insert], minlength=groups.count)
    if rules.update_detection:
        _refuse_multiple_changes(versions, version, groups, deletes, inserts)
    pair = (deletes == 1) & (inserts == 1)
    carryover = np.zeros(groups.count, bool)
    if rules.carryover_removal and pair.any():
        if rules.row_id is None:  # the key is the row: the pair's rows are equal
            carryover = pair
        else:
            carryover = pair & _all_equal_in_group(table, groups, pair, is_delete)
    new_kinds = kinds
    if rules.update_detection:
        update = (pair & ~carryover)[groups.ids]
        if update.any():
            new_kinds = kinds.copy()
            new_kinds[update & is_delete] = _PREIMAGE
            new_kinds[update & is_insert] = _POSTIMAGE
    relabel = new_kinds is not kinds
    out = table
    # Carry-overs go first, so labels are made for the kept rows only (a 10th of the
    # benchmark's commits; 0.025 s less for one of 1M rows).
    dropped = carryover[groups.ids]
    if dropped.any():
        kept = ~dropped
        out = out.filter(from_numpy(kept))
        if relabel:
            new_kinds = new_kinds[kept]
    if relabel:
        index = out.schema.get_field_index(CHANGE_TYPE)
        field = out.schema.field(index)
        codes = from_numpy(new_kinds)
        out = out.set_column(index, field, codes if are_codes(field.type) else labels(codes))
    return out


def labels(codes: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The change types that ``codes`` (indexes into ``CHANGE_TYPES``) stand for."""
    return _CODES.take(codes)


def change_kinds(change_type: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Each row's change type as its index in ``CHANGE_TYPES`` (as int8); a NULL or unknown
    one fails as the client plan fails on it (it checks every row once a pass runs)."""
    if are_codes(change_type.type):
        return to_numpy(_array(change_type))
    kinds = pc.index_in(change_type, value_set=_CODES)
    if kinds.null_count:
        bad = pc.filter(change_type, pc.is_null(kinds))[0].as_py()
        shown = "NULL" if bad is None else f"'{bad}'"
        raise ChangelogSourceError(
            f"{CONTRACT_VIOLATION}.UNEXPECTED_CHANGE_TYPE",
            f"_change_type {shown} is not one of {', '.join(CHANGE_TYPES)}: fix the source "
            "of the change feed.",
            changeType="NULL" if bad is None else bad,
        )
    return to_numpy(kinds).astype(np.int8)


def key_columns(table: pa.Table, row_id: Sequence[Sequence[str]] | None) -> list[pa.Array]:
    """The arrays that identify a row: the row id's columns (a nested path's value is NULL
    where a struct on the path is NULL, as Spark reads it), or every data column."""
    if row_id is None:
        return data_columns(table)
    keys = []
    for path in row_id:
        column = _array(table.column(path[0]))
        for name in path[1:]:
            column = pc.struct_field(column, [column.type.get_field_index(name)])
        keys.append(column)
    return keys


def data_columns(table: pa.Table, combined: bool = True) -> list[Any]:
    """The data columns; as they come (chunked) unless ``combined``: a comparison only
    gathers the rows it needs, and combining every column would copy the whole table."""
    names = [n for n in table.column_names if n not in METADATA_COLUMNS]
    return [_array(table.column(n)) if combined else table.column(n) for n in names]


def buckets_of(
    table: pa.Table | pa.RecordBatch, row_id: Sequence[Sequence[str]] | None, of: int
) -> np.ndarray:
    """Each row's bucket among ``of``: a hash of the row id (of the whole row without one),
    equal for rows the passes must see together. The hash is uniform, so ``bucket % n``
    and ``bucket // n`` of ``of = n * m`` buckets split rows independently: one hash
    assigns a row both its task (of ``n``) and its spill part in that task (of ``m``)."""
    source = table if isinstance(table, pa.Table) else pa.Table.from_batches([table])
    keys = key_columns(source, row_id)
    hashed = _mix(rows_hash(keys, "image" if row_id is None else "key", seed=1000))
    return (hashed % np.uint64(of)).astype(np.int64)


@dataclass(frozen=True)
class Groups:
    ids: np.ndarray  # int64 group of each row
    count: int
    first: np.ndarray  # int64 first row of each group


def group_rows(
    keys: Sequence[pa.Array], mode: str, seed: int = 0, hashed: Sequence[int] | None = None
) -> Groups:
    """Exact groups of equal keys: a hash of the keys (of those at ``hashed``, when given)
    groups the rows, each row is then compared with its group's first row in every key,
    and rows that only collided are grouped again among themselves with another hash of
    every key."""
    n = len(keys[0])
    exact = _exact_integers(keys)
    if exact is not None:
        _, first, ids = np.unique(exact, return_index=True, return_inverse=True)
        return Groups(ids.astype(np.int64).reshape(-1), len(first), first.astype(np.int64))
    hashed = rows_hash(keys if hashed is None else [keys[i] for i in hashed], mode, seed)
    _, first, ids = np.unique(hashed, return_index=True, return_inverse=True)
    ids = ids.astype(np.int64).reshape(-1)
    first = first.astype(np.int64)
    rows = np.arange(n, dtype=np.int64)
    others = rows[rows != first[ids]]
    if not len(others):
        return Groups(ids, len(first), first)
    equal = rows_equal(keys, others, first[ids[others]], mode)
    collided = others[~equal]
    if not len(collided):
        return Groups(ids, len(first), first)
    if seed > 16:  # unequal rows that hash alike under 17 seeds: the hash misses a difference
        raise AssertionError("row hash does not separate unequal keys")
    regrouped = group_rows([k.take(from_numpy(collided)) for k in keys], mode, seed + 1)
    ids[collided] = len(first) + regrouped.ids
    first = np.concatenate([first, collided[regrouped.first]])
    return Groups(ids, len(first), first)


def _exact_integers(keys: Sequence[pa.Array]) -> np.ndarray | None:
    """A lone integer-like key without NULLs is its own exact hash."""
    if len(keys) != 1 or keys[0].null_count:
        return None
    key = keys[0]
    width = _integer_width(key.type)
    if width is None:
        return None
    return _fixed_values(key, width)


def _is_fixed(data_type: pa.DataType) -> bool:
    """Types whose hash costs a pass over fixed-width values (not bytes, not nesting)."""
    return _integer_width(data_type) is not None or pa.types.is_floating(data_type)


def _integer_width(data_type: pa.DataType) -> int | None:
    if (
        pa.types.is_integer(data_type)
        or pa.types.is_temporal(data_type)
        or pa.types.is_boolean(data_type)
    ) and not pa.types.is_interval(data_type):
        return 1 if pa.types.is_boolean(data_type) else data_type.bit_width // 8
    return None


def _all_equal_in_group(
    table: pa.Table, groups: Groups, pair: np.ndarray, is_delete: np.ndarray
) -> np.ndarray:
    """Per group: whether every row of it equals its delete row (for delete+insert pairs;
    rows labelled update_* in the same group take part, as in the client's plans)."""
    delete_row = np.zeros(groups.count, np.int64)
    delete_row[groups.ids[is_delete]] = np.flatnonzero(is_delete)
    others = np.flatnonzero(pair[groups.ids] & ~is_delete)
    columns = data_columns(table, combined=False)
    equal = rows_equal(columns, others, delete_row[groups.ids[others]], "image")
    unequal = np.bincount(groups.ids[others[~equal]], minlength=groups.count)
    return unequal == 0


def are_codes(data_type: pa.DataType) -> bool:
    """Whether ``_change_type`` of this type holds codes (see ``resolve``), not labels."""
    return pa.types.is_int8(data_type)


def _refuse_multiple_changes(
    versions: pa.ChunkedArray | None,
    version: int | None,
    groups: Groups,
    deletes: np.ndarray,
    inserts: np.ndarray,
) -> None:
    bad = np.flatnonzero((deletes > 1) | (inserts > 1))
    if not len(bad):
        return
    group = int(bad[0])
    if versions is not None:
        version = versions[int(groups.first[group])].as_py()
    count_d, count_i = int(deletes[group]), int(inserts[group])
    raise ChangelogSourceError(
        f"{CONTRACT_VIOLATION}.UNEXPECTED_MULTIPLE_CHANGES_PER_ROW_VERSION",
        f"{MULTIPLE_CHANGES_SENTENCE}{version} ({count_d} deletes, {count_i} inserts); a "
        "changelog may hold at most one of each per row id and commit.",
        version=version,
        deletes=count_d,
        inserts=count_i,
    )


# ---------------------------------------------------------------------------------------
# Equality, column by column
# ---------------------------------------------------------------------------------------


def rows_equal(
    columns: Sequence[pa.Array | pa.ChunkedArray], left: np.ndarray, right: np.ndarray, mode: str
) -> np.ndarray:
    """For each pair (``left[k]``, ``right[k]``) of row positions: whether the rows are
    equal in every column, ``mode`` "image" (data) or "key" (row id) equality. Pairs found
    unequal stop being compared once they are most of what is left."""
    pending = np.arange(len(left))
    left_rows, right_rows = _rows(left), _rows(right)
    equal: pa.Array = pa.repeat(TRUE, len(left))
    for number, column in enumerate(columns, start=1):
        same = _equal(_gather(column, left_rows), _gather(column, right_rows), mode)
        equal = pc.and_(equal, same)
        if number % 4 == 0 and len(pending):
            still = to_numpy(equal)
            if still.sum() < len(still) // 2:  # compact: compare only pairs still equal
                pending = pending[still]
                left_rows, right_rows = _rows(left[pending]), _rows(right[pending])
                equal = pa.repeat(TRUE, len(pending))
    out = np.zeros(len(left), bool)
    out[pending] = to_numpy(equal)
    return out


def _rows(positions: np.ndarray) -> pa.Array | slice:
    """Row positions to gather, or the slice they form when consecutive: a copy-on-write
    rewrite keeps its rows' order, so a commit's pairs are often two runs of rows, which
    a slice reads without a gather (the 50-column benchmark commit: 0.08 s less a task)."""
    count = len(positions)
    if count and positions[-1] - positions[0] == count - 1 and (np.diff(positions) == 1).all():
        return slice(int(positions[0]), int(positions[0]) + count)
    return from_numpy(positions)


def _gather(column: pa.Array | pa.ChunkedArray, rows: pa.Array | slice) -> pa.Array:
    """The rows of ``column``; nested columns are always gathered (a copy starting at 0),
    since a slice's struct fields and map offsets would still start at the parent's."""
    if isinstance(rows, slice):
        if not pa.types.is_nested(column.type):
            return _array(column.slice(rows.start, rows.stop - rows.start))
        rows = from_numpy(np.arange(rows.start, rows.stop))
    return _array(column.take(rows))


def values_equal(left: pa.Array, right: pa.Array, mode: str) -> np.ndarray:
    """Element-wise NULL-safe equality of two arrays of one type."""
    return to_numpy(_equal(left, right, mode))


def _equal(left: pa.Array, right: pa.Array, mode: str) -> pa.Array:
    """``values_equal`` as an Arrow boolean array without NULLs, computed by Arrow's kernels
    (floats compared by their bits in images, every NaN equal to every NaN)."""
    left, right = _plain(left), _plain(right)
    data_type = left.type
    if pa.types.is_null(data_type):
        return pa.repeat(TRUE, len(left))
    if pa.types.is_floating(data_type):
        if mode == "image":  # the sign of zero counts; NaNs are compared below
            bits = {64: pa.int64(), 32: pa.int32(), 16: pa.int16()}[data_type.bit_width]
            same = pc.equal(left.view(bits), right.view(bits))
        else:
            same = pc.equal(left, right)
        same = pc.or_(same, pc.and_(pc.is_nan(left), pc.is_nan(right)))
    elif pa.types.is_struct(data_type):
        same = pa.repeat(TRUE, len(left))
        for index in range(data_type.num_fields):
            same = pc.and_(same, _equal(left.field(index), right.field(index), mode))
    elif _is_list(data_type):
        both = _valid(left) & _valid(right)
        same = from_numpy(_lists_equal(left, right, both, mode))
    else:
        same = pc.equal(left, right)
    if not (left.null_count or right.null_count):
        return pc.fill_null(same, FALSE)
    left_valid, right_valid = pc.is_valid(left), pc.is_valid(right)
    both = pc.and_(pc.and_(left_valid, right_valid), pc.fill_null(same, FALSE))
    return pc.or_(both, pc.and_(pc.invert(left_valid), pc.invert(right_valid)))


def _lists_equal(left: pa.Array, right: pa.Array, both: np.ndarray, mode: str) -> np.ndarray:
    same = np.zeros(len(left), bool)
    lengths = _list_lengths(left)
    candidates = np.flatnonzero(both & (lengths == _list_lengths(right)))
    if not len(candidates):
        return same
    chosen = from_numpy(candidates)
    left_part, right_part = left.take(chosen), right.take(chosen)
    elements = values_equal(_flat_values(left_part), _flat_values(right_part), mode)
    parents = _list_parents(lengths[candidates])
    unequal = np.bincount(parents[~elements], minlength=len(candidates))
    same[candidates] = unequal == 0
    return same


# ---------------------------------------------------------------------------------------
# Hashing, column by column
# ---------------------------------------------------------------------------------------


def rows_hash(columns: Sequence[pa.Array], mode: str, seed: int = 0) -> np.ndarray:
    """A 64-bit hash of each row of ``columns``: rows equal under ``mode`` hash alike."""
    hashed = np.full(len(columns[0]), seed + 1, np.uint64) * _GOLDEN
    for column in columns:
        hashed = _combine(hashed, column_hash(column, mode))
    return hashed


def column_hash(column: pa.Array, mode: str) -> np.ndarray:
    column = _plain(column)
    data_type = column.type
    n = len(column)
    if pa.types.is_null(data_type):
        return np.full(n, _NULL, np.uint64)
    if pa.types.is_floating(data_type):
        hashed = _mix(_float_bits(column, mode).astype(np.uint64))
    elif pa.types.is_struct(data_type):
        hashed = np.full(n, _GOLDEN, np.uint64)
        for index in range(data_type.num_fields):
            hashed = _combine(hashed, column_hash(column.field(index), mode))
    elif _is_list(data_type):
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
        width = _integer_width(data_type)
        if width is None:
            raise TypeError(f"cannot compare values of type {data_type}")
        hashed = _mix(_fixed_values(column, width).view(np.uint64))
    if column.null_count:
        hashed = np.where(_valid(column), hashed, _NULL)
    return hashed


def _list_hash(column: pa.Array, mode: str) -> np.ndarray:
    lengths = _list_lengths(column)
    hashed = _mix(lengths.astype(np.uint64) + _GOLDEN)
    values = _flat_values(column)
    if not len(values):
        return hashed
    parents = _list_parents(lengths)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    positions = np.arange(len(values), dtype=np.uint64) - starts[parents].astype(np.uint64)
    element = _mix(column_hash(values, mode) ^ _mix(positions + _MIX1))
    filled = np.flatnonzero(lengths > 0)
    sums = np.add.reduceat(element, starts[filled]) if len(filled) else element[:0]
    out = hashed.copy()
    out[filled] = _combine(hashed[filled], sums)
    return out


def _bytes_hash(column: pa.Array) -> np.ndarray:
    """A polynomial hash of each value's bytes, mixed with its length, in numpy."""
    if pa.types.is_string_view(column.type) or pa.types.is_binary_view(column.type):
        column = column.cast(pa.large_binary())
    large = pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type)
    n = len(column)
    offsets = np.frombuffer(column.buffers()[1], np.int64 if large else np.int32)
    offsets = offsets[column.offset : column.offset + n + 1].astype(np.int64)
    lengths = np.diff(offsets)
    hashed = _mix(lengths.astype(np.uint64) ^ _MIX2)
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


def _powers(length: int) -> np.ndarray:
    """Powers of an odd 64-bit constant, wrapping, cached and grown as needed."""
    global _POWERS
    if len(_POWERS) < length:
        grown = np.full(max(length, 2 * len(_POWERS)), _MIX2 | np.uint64(1), np.uint64)
        grown[0] = 1
        _POWERS = np.cumprod(grown, dtype=np.uint64)
    return _POWERS


# ---------------------------------------------------------------------------------------
# Arrow helpers
# ---------------------------------------------------------------------------------------


def _array(data: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(data, pa.ChunkedArray):
        return data.combine_chunks() if data.num_chunks != 1 else data.chunk(0)
    return data


def _plain(column: pa.Array) -> pa.Array:
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


def _valid(column: pa.Array) -> np.ndarray:
    if not column.null_count:
        return np.ones(len(column), bool)
    return to_numpy(column.is_valid())


def _is_list(data_type: pa.DataType) -> bool:
    return (
        pa.types.is_list(data_type)
        or pa.types.is_large_list(data_type)
        or pa.types.is_fixed_size_list(data_type)
        or pa.types.is_map(data_type)
    )


def _is_bytes(data_type: pa.DataType) -> bool:
    return (
        pa.types.is_string(data_type)
        or pa.types.is_binary(data_type)
        or pa.types.is_large_string(data_type)
        or pa.types.is_large_binary(data_type)
        or pa.types.is_string_view(data_type)
        or pa.types.is_binary_view(data_type)
    )


def _list_lengths(column: pa.Array) -> np.ndarray:
    lengths = to_numpy(pc.list_value_length(column)).astype(np.int64)
    if column.null_count:  # a NULL list holds no elements
        lengths[~_valid(column)] = 0
    return lengths


def _flat_values(column: pa.Array) -> pa.Array:
    """The elements of every non-NULL list, in order (a NULL list holds none)."""
    return pc.list_flatten(column)


def _list_parents(lengths: np.ndarray) -> np.ndarray:
    """The list each flattened element belongs to (NULL lists hold none, as flattened)."""
    return np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)


def _fixed_values(column: pa.Array, width: int) -> np.ndarray:
    """The values of an integer-like array as int64 (a NULL's slot holds any value: the
    callers mask NULLs)."""
    if pa.types.is_boolean(column.type):
        return to_numpy(column).astype(np.int64)
    signed = {1: pa.int8(), 2: pa.int16(), 4: pa.int32(), 8: pa.int64()}[width]
    return to_numpy(column.view(signed)).astype(np.int64)


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


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, element-wise."""
    z = values.astype(np.uint64, copy=True)
    z ^= z >> np.uint64(30)
    z *= _MIX1
    z ^= z >> np.uint64(27)
    z *= _MIX2
    z ^= z >> np.uint64(31)
    return z


def _combine(hashed: np.ndarray, more: np.ndarray) -> np.ndarray:
    return _mix(hashed * _GOLDEN + more)
