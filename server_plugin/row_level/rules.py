"""Carry-over removal and update detection on a commit's rows, inside the source.

The rules are those of the client's plans (``spark_cdc.rewrite.row_level``), which follow
Spark's ``ResolveChangelogTable``; this package applies them to Arrow data with numpy and
pyarrow compute, never a Python loop over rows, so a source can hand Spark a resolved
feed and spare it the shuffle, aggregate and state of the client plan.

A *group* is one row id in one commit. With a row id, a group holding exactly one
``delete`` and one ``insert`` whose rows are equal in every data column is a carry-over
and is dropped whole; without a row id (``row_id=None``) a row's identity is its whole
content, so such a pair is simply an identical row removed and re-added. Update detection
relabels a remaining delete+insert pair ``update_preimage``/``update_postimage`` and fails
on a group with two deletes or two inserts. Equality is the client's (``equality``).

Rows are grouped by a 64-bit hash of their key (``hashing``), and every group is then
checked value by value, so a hash collision can never merge two groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.arrow_types import from_numpy, text_array, to_numpy
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.row_level.arrays import array, fixed_values, integer_width
from spark_cdc.server_plugin.row_level.equality import rows_equal
from spark_cdc.server_plugin.row_level.hashing import mix, rows_hash
from spark_cdc.server_plugin.vocabulary import (
    CHANGE_TYPE,
    CHANGE_TYPES,
    COMMIT_VERSION,
    DELETE,
    INSERT,
    METADATA_COLUMNS,
    UPDATE_POSTIMAGE,
    UPDATE_PREIMAGE,
)

_CODES = text_array(list(CHANGE_TYPES))
_INSERT, _DELETE = CHANGE_TYPES.index(INSERT), CHANGE_TYPES.index(DELETE)
_PREIMAGE, _POSTIMAGE = CHANGE_TYPES.index(UPDATE_PREIMAGE), CHANGE_TYPES.index(UPDATE_POSTIMAGE)


# Where a source hands the passes its rows' lineage, when it has one (Iceberg v3's
# ``_row_id`` and ``_last_updated_sequence_number``): hidden columns, never served.
LINEAGE_COLUMNS = ("__spark_cdc_row_id", "__spark_cdc_row_version")
_NOT_DATA = (*METADATA_COLUMNS, *LINEAGE_COLUMNS)


@dataclass(frozen=True)
class RowLevelRules:
    """What to resolve. ``row_id`` holds column paths (``("key", "id")`` for ``key.id``) in
    the table's own spelling, or None: rows are identified by their whole content.
    ``lineage``: the rows carry ``LINEAGE_COLUMNS`` (see ``drop_lineage_carryovers``)."""

    row_id: tuple[tuple[str, ...], ...] | None
    carryover_removal: bool
    update_detection: bool
    lineage: bool = False

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
    if rules.lineage and rules.carryover_removal:
        table, kinds = drop_lineage_carryovers(table, kinds)
        if not table.num_rows:
            return table
    is_delete, is_insert = kinds == _DELETE, kinds == _INSERT
    if not rules.update_detection and not (is_delete.any() and is_insert.any()):
        return table  # no group can hold a delete+insert pair
    keys = key_columns(table, rules.row_id)
    key_mode = "image" if rules.row_id is None else "key"
    versions = table.column(COMMIT_VERSION) if COMMIT_VERSION in table.column_names else None
    if versions is not None:
        span = pc.min_max(versions)
        if span["min"] != span["max"]:  # several commits: the version is part of the key
            keys = [*keys, array(versions)]
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


def drop_lineage_carryovers(table: pa.Table, kinds: np.ndarray) -> tuple[pa.Table, np.ndarray]:
    """``table`` without the delete+insert pairs whose lineage says they are one row,
    unchanged: the same row id and row version (Spark's ``rowVersion`` contract; Iceberg v3
    writers keep both when they copy a row and give an updated row a new version). Rows
    whose lineage is unknown (NULL) are left to the whole-row rules, so a writer that drops
    the lineage of the rows it copies costs speed, never rows; no data column is read."""
    row_id, version = (array(table.column(name)) for name in LINEAGE_COLUMNS)
    known = to_numpy(pc.and_(pc.is_valid(row_id), pc.is_valid(version)))
    if not known.any():
        return table, kinds
    keys = [row_id, version]
    if COMMIT_VERSION in table.column_names:
        keys.append(array(table.column(COMMIT_VERSION)))
    groups = group_rows(keys, "key")
    total = np.bincount(groups.ids, minlength=groups.count)
    deletes = np.bincount(groups.ids[known & (kinds == _DELETE)], minlength=groups.count)
    inserts = np.bincount(groups.ids[known & (kinds == _INSERT)], minlength=groups.count)
    dropped = ((total == 2) & (deletes == 1) & (inserts == 1))[groups.ids]
    if not dropped.any():
        return table, kinds
    kept = ~dropped
    return table.filter(from_numpy(kept)), kinds[kept]


def labels(codes: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The change types that ``codes`` (indexes into ``CHANGE_TYPES``) stand for."""
    return _CODES.take(codes)


def change_kinds(change_type: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Each row's change type as its index in ``CHANGE_TYPES`` (as int8); a NULL or unknown
    one fails as the client plan fails on it (it checks every row once a pass runs)."""
    if are_codes(change_type.type):
        return to_numpy(array(change_type))
    kinds = pc.index_in(change_type, value_set=_CODES)
    if kinds.null_count:
        bad = pc.filter(change_type, pc.is_null(kinds))[0].as_py()
        raise error(
            "CHANGELOG_CONTRACT_VIOLATION.UNEXPECTED_CHANGE_TYPE",
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
        column = array(table.column(path[0]))
        for name in path[1:]:
            column = pc.struct_field(column, [column.type.get_field_index(name)])
        keys.append(column)
    return keys


def data_columns(table: pa.Table, combined: bool = True) -> list[Any]:
    """The data columns; as they come (chunked) unless ``combined``: a comparison only
    gathers the rows it needs, and combining every column would copy the whole table."""
    names = [n for n in table.column_names if n not in _NOT_DATA]
    return [array(table.column(n)) if combined else table.column(n) for n in names]


def buckets_of(
    table: pa.Table | pa.RecordBatch, row_id: Sequence[Sequence[str]] | None, of: int
) -> np.ndarray:
    """Each row's bucket among ``of``: a hash of the row id (of the whole row without one),
    equal for rows the passes must see together. The hash is uniform, so ``bucket % n``
    and ``bucket // n`` of ``of = n * m`` buckets split rows independently: one hash
    assigns a row both its task (of ``n``) and its spill part in that task (of ``m``)."""
    source = table if isinstance(table, pa.Table) else pa.Table.from_batches([table])
    keys = key_columns(source, row_id)
    hashed = mix(rows_hash(keys, "image" if row_id is None else "key", seed=1000))
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
    exact = _exact_groups(keys)
    if exact is not None:
        return exact
    hashes = rows_hash(keys if hashed is None else [keys[i] for i in hashed], mode, seed)
    groups = _distinct(hashes)
    ids, first = groups.ids, groups.first
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


def _distinct(values: np.ndarray) -> Groups:
    """Groups of equal ``values``, numbered in order of first appearance: Arrow's hash
    table (``dictionary_encode``), several times faster than ``np.unique``'s sort."""
    encoded = pc.dictionary_encode(from_numpy(values))
    ids = to_numpy(encoded.indices).astype(np.int64)
    starts = np.ones(len(ids), bool)  # a row whose group no earlier row had
    starts[1:] = ids[1:] > np.maximum.accumulate(ids)[:-1]
    return Groups(ids, len(encoded.dictionary), np.flatnonzero(starts))


def _exact_groups(keys: Sequence[pa.Array]) -> Groups | None:
    """Groups of integer-like keys without NULLs, which are their own exact hashes: each
    key's groups, combined pairwise (a row id with the ``_commit_version`` of gathered
    commits: 3 hash passes, against a hash of both and a check of every row)."""
    groups: Groups | None = None
    for key in keys:
        width = None if key.null_count else integer_width(key.type)
        if width is None:
            return None
        own = _distinct(fixed_values(key, width))
        groups = own if groups is None else _distinct(groups.ids * own.count + own.ids)
    return groups


def _is_fixed(data_type: pa.DataType) -> bool:
    """Types whose hash costs a pass over fixed-width values (not bytes, not nesting)."""
    return integer_width(data_type) is not None or pa.types.is_floating(data_type)


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
    raise error(
        "CHANGELOG_CONTRACT_VIOLATION.UNEXPECTED_MULTIPLE_CHANGES_PER_ROW_VERSION",
        version=version,
        deletes=count_d,
        inserts=count_i,
    )
