"""Finding a batch's keys among many rows by a sorted index of their keys: a binary search
per key of the batch, so the cost follows the batch (its keys times the logarithm of the
rows), where a membership test of every row costs the rows.

An index sorts ``key_values``: one integer or temporal key's own values, else a hash of the
key. It is built once per set of rows that does not change (a Parquet file of the target,
kept per path; the state a stream's writer keeps, merged with the index of what each
batch adds). Files this package writes are sorted by key, so their index is one pass; an
unsorted file's costs a sort, about two membership tests of its rows. A hash matches
every key that hashes alike; ``exact`` keeps only the rows whose key columns equal one
of the batch's, where a wrong match would delete a row of another key. A key of one
integer or temporal column is its own value: its index needs no confirming, so a file's
index keeps no copy of its key column. A key with a NULL part is no key (a batch holding
one is refused; a truncate's rows are found by the files' statistics): it is left out of
every index and finds nothing.

An index is what a worker keeps of every file it looked in, for every table it applies
to, so its size is the process's memory: a file written sorted by key (this package's
are) keeps only the sorted values, its rows being their positions; another keeps each
value's row as 32 bits.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, TypeVar

import numpy as np
import pyarrow as pa
from spark_cdc.server_plugin.arrow_types import from_numpy, to_numpy
from spark_cdc.server_plugin.row_level.arrays import array
from spark_cdc.server_plugin.row_level.equality import values_equal
from spark_cdc.server_plugin.row_level.hashing import rows_hash
from spark_cdc.server_plugin.sinks.apply.engine.shared_cache import Codec, SharedFiles

T = TypeVar("T")
# What a process keeps of a target's files' key indexes between batches (a 10M-row file of
# one long key: about 240 MB).
FILE_KEYS_BYTES = 1 << 30
# A batch's keys spanning fewer values than this, or than this many times their count,
# are looked up by a table of membership (``BatchKeys.members``).
_DENSE_SPAN, _DENSE_RATIO = 1 << 16, 16


def key_values(keys: pa.Table, names: list[str]) -> np.ndarray:
    """What an index sorts each row by: one integer, date or timestamp key column's own
    values (a file written sorted by key is then indexed by one pass, and nothing is
    hashed), else the hash of the key (rows of one key hash alike)."""
    if len(names) == 1:
        column = array(keys.column(names[0]))
        if _orderable(column.type):
            if pa.types.is_temporal(column.type):  # as its integers, which order alike
                column = column.view(pa.int32() if column.type.bit_width == 32 else pa.int64())
            if column.null_count:  # a truncate's NULL key: its row is not looked up
                column = column.fill_null(0)
            return to_numpy(column.cast(pa.int64()) if column.type != pa.int64() else column)
    if not keys.num_rows:
        return np.empty(0, np.uint64)
    return rows_hash([array(keys.column(n)) for n in names], "key")


def exact_key(schema: pa.Schema, names: list[str] | tuple[str, ...]) -> bool:
    """Whether ``key_values`` of these columns are the key itself (one integer or temporal
    column), not a hash that other keys may share."""
    return len(names) == 1 and _orderable(schema.field(names[0]).type)


def index_of(columns: pa.Table, names: list[str] | tuple[str, ...], first: int = 0) -> KeyIndex:
    """The index of ``columns``' rows (numbered from ``first``) by the key ``names``, but
    for those with a NULL key part."""
    keyed = _keyed(columns, names)
    if keyed is None:
        return KeyIndex.of(key_values(columns, list(names)), first)
    values = key_values(columns.take(from_numpy(keyed)), list(names))
    return KeyIndex.of(values, first, keyed)


def _keyed(columns: pa.Table, names: list[str] | tuple[str, ...]) -> np.ndarray | None:
    """The rows of ``columns`` with no NULL key part (None: all of them)."""
    if not any(columns.column(n).null_count for n in names):
        return None
    valid = np.ones(columns.num_rows, bool)
    for name in names:
        valid &= to_numpy(columns.column(name).is_valid())
    return np.flatnonzero(valid)


def _orderable(data_type: pa.DataType) -> bool:
    """Whether values of the type order as their int64 view."""
    return (pa.types.is_integer(data_type) and data_type != pa.uint64()) or (
        pa.types.is_temporal(data_type)
        and not pa.types.is_interval(data_type)
        and not pa.types.is_time(data_type)
    )


@dataclass(frozen=True)
class BatchKeys:
    """A batch's distinct ``key_values``, sorted, with a row of ``keys`` for each (to
    confirm a match: ``exact``); ``collide`` when two different keys of the batch hash
    alike (``ordered`` and ``order`` then keep every key's value, sorted, and its row)."""

    values: np.ndarray
    rows: np.ndarray
    keys: pa.Table
    names: tuple[str, ...]
    collide: bool
    ordered: np.ndarray
    order: np.ndarray
    indexed: int | None = None
    exact_index: bool = False

    @classmethod
    def of(
        cls, keys: pa.Table, names: list[str] | tuple[str, ...], indexed: int | None = None
    ) -> BatchKeys:
        """The batch's ``keys`` (columns ``names``), indexed by the first ``indexed`` of
        them (all by default): type 2's versions are found by their key's index, then
        confirmed with ``__START_AT``."""
        names = tuple(names)
        keys = keys.select(list(names))
        keyed = _keyed(keys, names[:indexed])
        if keyed is not None:  # a key with a NULL part finds nothing
            keys = keys.take(from_numpy(keyed))
        exact = exact_key(keys.schema, names[:indexed])
        values = key_values(keys, list(names[:indexed]))
        order = np.argsort(values, kind="stable")
        ordered = values[order]
        first = np.ones(len(ordered), bool)
        first[1:] = ordered[1:] != ordered[:-1]
        collide = False
        if not first.all():  # the same key twice, or two keys hashing alike
            again = order[~first]
            before = order[np.flatnonzero(~first) - 1]
            pairs = (keys.take(from_numpy(again)), keys.take(from_numpy(before)))
            collide = not _equal_rows(*pairs).all()
        return cls(
            ordered[first], order[first], keys, names, collide, ordered, order, indexed, exact
        )

    @cached_property
    def members(self) -> tuple[int, np.ndarray] | None:
        """The batch's values as a table of membership (``first``, and per value from
        it whether it is one of them), when they span few values for their count (a
        million keys among ten million: 11 MB): an index then finds them by one look per
        row of a range, not two binary searches per key (a tenth of the time measured).
        None: they span too many (hashes; few keys across a wide range)."""
        if not len(self.values):
            return None
        low, high = int(self.values[0]), int(self.values[-1])
        if high - low >= max(_DENSE_SPAN, _DENSE_RATIO * len(self.values)):
            return None
        table = np.zeros(high - low + 1, bool)
        table[self.values - low] = True
        return low, table

    @property
    def confirmed(self) -> tuple[str, ...]:
        """The columns a match found by the index is compared on: those the index does
        not hold exactly."""
        indexed = len(self.names) if self.indexed is None else self.indexed
        return self.names[indexed:] if self.exact_index else self.names

    def typed(self, columns: pa.Table) -> pa.Table:
        """``columns`` (key columns read from a file) as the batch types them, so that
        they compare (a file may hold int32 or string views where the batch has int64 or
        strings; equal keys hash alike either way)."""
        return pa.table(
            [columns.column(n).cast(self.keys.schema.field(n).type) for n in self.names],
            names=list(self.names),
        )

    def exact(self, columns: pa.Table, candidates: np.ndarray, values: np.ndarray) -> np.ndarray:
        """The ``candidates`` (rows of ``columns``, typed as the batch, whose key values
        are ``values``) whose key is one of the batch's: each compared with the batch's
        key of its value (with every key of it, when two keys hash alike), on the columns
        the index does not hold exactly (``confirmed``)."""
        compared = list(self.confirmed)
        if not len(candidates) or not compared:
            return candidates
        found = columns.select(compared).take(from_numpy(candidates))
        keys = self.keys.select(compared)
        if not self.collide:
            mine = keys.take(from_numpy(self.rows[np.searchsorted(self.values, values)]))
            return candidates[_equal_rows(found, mine)]
        low = np.searchsorted(self.ordered, values, "left")
        counts = np.searchsorted(self.ordered, values, "right") - low
        each = np.repeat(np.arange(len(candidates)), counts)
        slots = np.repeat(low - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        mine = keys.take(from_numpy(self.order[slots]))
        equal = _equal_rows(found.take(from_numpy(each)), mine)
        return candidates[np.bincount(each[equal], minlength=len(candidates)) > 0]


def _equal_rows(left: pa.Table, right: pa.Table) -> np.ndarray:
    """Per row, whether every column of ``left`` equals ``right``'s (NULL equals NULL)."""
    same = np.ones(left.num_rows, bool)
    for name in left.column_names:  # any type: structs and floats too (values_equal)
        same &= values_equal(array(left.column(name)), array(right.column(name)), "image")
    return same


@dataclass(frozen=True)
class KeyIndex:
    """Rows by their ``key_values``: ``values`` sorted, ``rows`` the row of each (None:
    ``first`` onwards in order, the values having been sorted already)."""

    values: np.ndarray
    rows: np.ndarray | None
    first: int = 0

    @classmethod
    def of(cls, values: np.ndarray, first: int = 0, rows: np.ndarray | None = None) -> KeyIndex:
        """The index of ``values``, of rows ``first`` onwards (or of ``first`` plus each
        of ``rows``, when given)."""
        if not len(values) or bool((values[1:] >= values[:-1]).all()):
            if rows is None:
                return cls(values, None, first)
            return cls(values, _narrow(rows + first))
        order = np.argsort(values, kind="stable")
        return cls(values[order], _narrow((order if rows is None else rows[order]) + first))

    @property
    def nbytes(self) -> int:
        return int(self.values.nbytes + (0 if self.rows is None else self.rows.nbytes))

    def positions(self, slots: np.ndarray) -> np.ndarray:
        """The rows at ``slots`` of the sorted values."""
        if self.rows is None:
            return slots.astype(np.int64) + self.first
        return self.rows[slots].astype(np.int64)

    def find(self, wanted: BatchKeys) -> tuple[np.ndarray, np.ndarray]:
        """The rows whose key value is one of ``wanted``'s (every row of those keys, and
        any other key's row that hashes alike), sorted, and their values."""
        if wanted.members is not None:
            low, table = wanted.members
            start = int(np.searchsorted(self.values, low, "left"))
            stop = int(np.searchsorted(self.values, low + len(table) - 1, "right"))
            slots = start + np.flatnonzero(table[self.values[start:stop] - low])
            rows = self.positions(slots)
            if self.rows is None:  # in row order already
                return rows, self.values[slots]
            order = np.argsort(rows)
            return rows[order], self.values[slots][order]
        starts = np.searchsorted(self.values, wanted.values, "left")
        counts = np.searchsorted(self.values, wanted.values, "right") - starts
        hit = counts > 0
        starts, counts = starts[hit], counts[hit]
        # Every index of each run [start, start + count), in one vectorized pass.
        slots = np.repeat(starts - np.cumsum(counts) + counts, counts)
        slots += np.arange(int(counts.sum()))
        rows = self.positions(slots)
        order = np.argsort(rows)
        return rows[order], self.values[slots][order]

    def merged(self, other: KeyIndex) -> KeyIndex:
        """Both as one: a stable sort of two sorted runs is one linear merge (numpy's
        timsort finds the runs), not a sort of the whole again."""
        values = np.concatenate([self.values, other.values])
        order = np.argsort(values, kind="stable")
        slots = np.arange(len(values))
        rows = np.concatenate(
            [self.positions(slots[: len(self.values)]), other.positions(slots[: len(other.values)])]
        )
        return KeyIndex(values[order], _narrow(rows[order]))


def _narrow(rows: np.ndarray) -> np.ndarray:
    """Row numbers as 32 bits where they fit (every file, most states): half the memory."""
    if len(rows) and int(rows.max()) >= np.iinfo(np.int32).max:
        return rows.astype(np.int64)
    return rows.astype(np.int32)


@dataclass(frozen=True)
class KeyRuns:
    """The index of rows that grow batch by batch (a stream's state): one run per batch,
    the last two merged while the later holds a quarter of the earlier's rows or more. A
    lookup searches a few runs (their sizes fall fourfold), and a row is merged again a
    few times in its life, not with every batch (each merge allocates the whole run)."""

    runs: tuple[KeyIndex, ...] = ()

    def added(self, run: KeyIndex) -> KeyRuns:
        runs = [*self.runs, run]
        while len(runs) > 1 and len(runs[-1].values) * 4 >= len(runs[-2].values):
            last = runs.pop()
            runs[-1] = runs[-1].merged(last)
        return KeyRuns(tuple(runs))

    def find(self, wanted: BatchKeys) -> np.ndarray:
        """The rows (sorted) whose key value is one of ``wanted``'s."""
        found = [run.find(wanted)[0] for run in self.runs]
        return np.sort(np.concatenate(found)) if found else np.empty(0, np.int64)


@dataclass(frozen=True)
class FileKeys:
    """One file's key columns that a match is confirmed on (typed as the batches that
    look in it: ``BatchKeys.confirmed``) and the index of its keys."""

    columns: pa.Table
    index: KeyIndex

    @classmethod
    def of(cls, columns: pa.Table, wanted: BatchKeys) -> FileKeys:
        """The keys of a file whose key columns are ``columns`` (as the file types them),
        as batches like ``wanted`` look them up."""
        typed = wanted.typed(columns)
        index = index_of(typed, wanted.names[: wanted.indexed])
        return cls(typed.select(list(wanted.confirmed)), index)

    def positions(self, wanted: BatchKeys) -> np.ndarray:
        """The file's rows (sorted) whose key is one of ``wanted``'s, exactly."""
        return wanted.exact(self.columns, *self.index.find(wanted))

    def tables(self) -> tuple[pa.Table, pa.Table]:
        """As tables (``shared_cache``): the columns, and the index with its first row."""
        index = {"values": from_numpy(self.index.values)}
        if self.index.rows is not None:
            index["rows"] = from_numpy(self.index.rows)
        first = {"first": str(self.index.first)}
        return self.columns, pa.table(index).replace_schema_metadata(first)

    @classmethod
    def from_tables(cls, tables: tuple[pa.Table, ...]) -> FileKeys:
        columns, index = tables
        rows = to_numpy(index.column("rows")) if "rows" in index.column_names else None
        first = int((index.schema.metadata or {})[b"first"])
        return cls(columns, KeyIndex(to_numpy(index.column("values")), rows, first))


class BudgetCache(Generic[T]):
    """Values made once and kept by key, up to ``budget`` bytes (``size`` of each): what a
    process keeps of files that never change. Past the budget the least recently used go,
    but never one used in the current round (``next_round``: a batch), whose values are
    then made and not kept: a batch needing more than the budget finds what is kept and
    reads the rest, where plain LRU would drop each value before its next use."""

    def __init__(
        self, budget: int, size: Callable[[T], int], shared: SharedFiles[T] | None = None
    ) -> None:
        self.budget, self.size, self.shared = budget, size, shared
        self._kept: OrderedDict[Hashable, tuple[T, int]] = OrderedDict()
        self._bytes = 0
        self._round = 0
        self._lock = threading.Lock()  # values are made by several threads at once

    def __getstate__(self) -> dict[str, Any]:
        """A cache travels empty (code shipped by value pickles its module's caches)."""
        return {"budget": self.budget, "size": self.size, "shared": self.shared}

    def __setstate__(self, state: dict[str, Any]) -> None:
        BudgetCache.__init__(self, state["budget"], state["size"], state["shared"])

    def next_round(self) -> None:
        self._round += 1
        if self.shared is not None:
            self.shared.next_round()

    def get(self, key: Hashable, make: Callable[[], T]) -> T:
        folder = None if self.shared is None else self.shared.folder()
        if folder is not None:  # the machine's processes share it (``shared_cache``)
            assert self.shared is not None
            return self.shared.get(folder, key, make)
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None:
                self._kept[key] = (kept[0], self._round)
                self._kept.move_to_end(key)
                return kept[0]
        made = make()
        size = self.size(made)
        with self._lock:
            while self._bytes + size > self.budget and self._kept:
                oldest, (value, used) = next(iter(self._kept.items()))
                if used == self._round:
                    return made  # every kept value serves this round: this one is not kept
                del self._kept[oldest]
                self._bytes -= self.size(value)
            if size <= self.budget and key not in self._kept:
                self._kept[key] = (made, self._round)
                self._bytes += size
        return made


class FileKeysCache(BudgetCache[FileKeys]):
    """``FileKeys`` of the files a process looked in, by path, size and modification time
    (a Delta table's data file never changes; the size and time tell a file of a table
    made again at the same path under the same name apart)."""

    def __init__(self, budget: int, shared: str | None = None) -> None:
        """``shared``: kept in files every process of the machine maps, when run by Spark
        (``shared_cache``), under this name; else in this process."""
        files = None if shared is None else SharedFiles(shared, budget, _FILE_KEYS_CODEC)
        super().__init__(budget, lambda keys: keys.columns.nbytes + keys.index.nbytes, files)

    def keys(self, file: tuple[str, int, int], read: Any, wanted: BatchKeys) -> FileKeys:
        """The keys of ``file`` (its path, size and modification time), read with
        ``read()`` (its key columns) when not kept."""

        return self.get((file, wanted.names, wanted.indexed), lambda: FileKeys.of(read(), wanted))


_FILE_KEYS_CODEC: Codec[FileKeys] = Codec(FileKeys.tables, FileKeys.from_tables)
