"""Finding a batch's keys among many rows by a sorted index of their key hashes: a binary
search per key of the batch, so the cost follows the batch (its keys times the logarithm
of the rows), where a membership test of every row costs the rows.

An index is built once per set of rows that does not change (a Parquet file of the
target, the state a stream's writer keeps, which grows by merging the index of what each
batch adds), and costs a sort of their hashes: about what one membership test of every
row costs, so it pays from the second lookup on. A hash matches every key that hashes
alike; ``exact`` keeps only the rows whose key columns equal one of the batch's, where a
wrong match would delete a row of another key.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.arrow_types import from_numpy, to_numpy
from spark_cdc.server_plugin.row_level.arrays import array
from spark_cdc.server_plugin.row_level.hashing import rows_hash


def key_hashes(keys: pa.Table, names: list[str]) -> np.ndarray:
    """The hash of each row's key (rows of one key hash alike; NULL keys too)."""
    if not keys.num_rows:
        return np.empty(0, np.uint64)
    return rows_hash([array(keys.column(n)) for n in names], "key")


@dataclass(frozen=True)
class BatchKeys:
    """A batch's distinct key hashes, sorted, with a row of ``keys`` for each (to confirm a
    match: ``exact``); ``collide`` when two different keys of the batch hash alike."""

    hashes: np.ndarray
    rows: np.ndarray
    keys: pa.Table
    names: tuple[str, ...]
    collide: bool

    @classmethod
    def of(cls, keys: pa.Table, names: list[str] | tuple[str, ...]) -> BatchKeys:
        names = tuple(names)
        keys = keys.select(list(names))
        hashed = key_hashes(keys, list(names))
        order = np.argsort(hashed, kind="stable")
        ordered = hashed[order]
        first = np.ones(len(ordered), bool)
        first[1:] = ordered[1:] != ordered[:-1]
        collide = False
        if not first.all():  # the same key twice, or two keys hashing alike
            again = order[~first]
            before = order[np.flatnonzero(~first) - 1]
            collide = not _equal(keys.take(from_numpy(again)), keys.take(from_numpy(before)))
        return cls(ordered[first], order[first], keys, names, collide)

    def typed(self, columns: pa.Table) -> pa.Table:
        """``columns`` (key columns read from a file) as the batch types them, so that
        they compare (a file may hold int32 or string views where the batch has int64 or
        strings; equal keys hash alike either way)."""
        return pa.table(
            [columns.column(n).cast(self.keys.schema.field(n).type) for n in self.names],
            names=list(self.names),
        )

    def exact(self, columns: pa.Table, candidates: np.ndarray, hashes: np.ndarray) -> np.ndarray:
        """The ``candidates`` (rows of ``columns``, typed as the batch, whose key hashes
        are ``hashes``) whose key is one of the batch's: each compared with the batch's
        key of its hash."""
        if not len(candidates):
            return candidates
        found = columns.take(from_numpy(candidates))
        if self.collide:
            return candidates[_among(found, self.keys, self.names)]
        mine = self.keys.take(from_numpy(self.rows[np.searchsorted(self.hashes, hashes)]))
        return candidates[_equal_rows(found, mine)]


def _equal_rows(left: pa.Table, right: pa.Table) -> np.ndarray:
    """Per row, whether every column of ``left`` equals ``right``'s (NULL equals NULL)."""
    same = np.ones(left.num_rows, bool)
    for name in left.column_names:
        a, b = left.column(name), right.column(name)
        equal = pc.fill_null(pc.equal(a, b), False)
        both_null = pc.and_(pc.is_null(a), pc.is_null(b))
        same &= to_numpy(pc.or_(equal, both_null))
    return same


def _equal(left: pa.Table, right: pa.Table) -> bool:
    return bool(_equal_rows(left, right).all())


def _among(found: pa.Table, keys: pa.Table, names: tuple[str, ...]) -> np.ndarray:
    """Per row of ``found``, whether its key is one of ``keys``' (by a hash join)."""
    if len(names) == 1:
        hits = pc.is_in(found.column(names[0]), value_set=array(keys.column(names[0])))
        return to_numpy(pc.fill_null(hits, False))
    indexed = found.append_column("__row", pa.array(np.arange(found.num_rows)))
    joined = indexed.join(keys.group_by(list(names)).aggregate([]), list(names))
    hit = np.zeros(found.num_rows, bool)
    hit[to_numpy(joined.column("__row"))] = True
    return hit


@dataclass(frozen=True)
class KeyIndex:
    """Rows by the hash of their key: ``hashes`` sorted, ``rows`` the row of each."""

    hashes: np.ndarray
    rows: np.ndarray

    @classmethod
    def of(cls, hashes: np.ndarray, first: int = 0) -> KeyIndex:
        order = np.argsort(hashes, kind="stable")
        return cls(hashes[order], order.astype(np.int64) + first)

    @property
    def nbytes(self) -> int:
        return int(self.hashes.nbytes + self.rows.nbytes)

    def find(self, wanted: BatchKeys) -> tuple[np.ndarray, np.ndarray]:
        """The rows whose key hashes as one of ``wanted``'s (every row of those keys, and
        any other key's row that hashes alike), sorted, and their hashes."""
        starts = np.searchsorted(self.hashes, wanted.hashes, "left")
        counts = np.searchsorted(self.hashes, wanted.hashes, "right") - starts
        hit = counts > 0
        starts, counts = starts[hit], counts[hit]
        # Every index of each run [start, start + count), in one vectorized pass.
        slots = np.repeat(starts - np.cumsum(counts) + counts, counts)
        slots += np.arange(int(counts.sum()))
        rows = self.rows[slots]
        order = np.argsort(rows)
        return rows[order], self.hashes[slots][order]

    def merged(self, other: KeyIndex) -> KeyIndex:
        """Both as one: a stable sort of two sorted runs is one linear merge (numpy's
        timsort finds the runs), not a sort of the whole again."""
        hashes = np.concatenate([self.hashes, other.hashes])
        order = np.argsort(hashes, kind="stable")
        return KeyIndex(hashes[order], np.concatenate([self.rows, other.rows])[order])


@dataclass(frozen=True)
class FileKeys:
    """One file's key columns (typed as the batches that look in it) and their index."""

    columns: pa.Table
    index: KeyIndex

    def positions(self, wanted: BatchKeys) -> np.ndarray:
        """The file's rows (sorted) whose key is one of ``wanted``'s, exactly."""
        return wanted.exact(self.columns, *self.index.find(wanted))


class FileKeysCache:
    """``FileKeys`` of the files a process looked in, by path (a Delta table's data file
    never changes: a path names the same rows for ever), the least recently used dropped
    past ``budget`` bytes."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._kept: OrderedDict[str, FileKeys] = OrderedDict()
        self._bytes = 0

    def get(self, path: str, read: Any, wanted: BatchKeys) -> FileKeys:
        """The file's keys, read with ``read()`` (its key columns) when not kept."""
        kept = self._kept.get(path)
        if kept is not None:
            self._kept.move_to_end(path)
            return kept
        columns = wanted.typed(read())
        made = FileKeys(columns, KeyIndex.of(key_hashes(columns, list(wanted.names))))
        self._kept[path] = made
        self._bytes += _size(made)
        while self._bytes > self.budget and len(self._kept) > 1:
            _, dropped = self._kept.popitem(last=False)
            self._bytes -= _size(dropped)
        return made


def _size(keys: FileKeys) -> int:
    return keys.columns.nbytes + keys.index.nbytes
