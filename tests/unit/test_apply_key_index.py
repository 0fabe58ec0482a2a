"""The key index (``sinks.apply.key_index``) against a plain membership test: random key
columns (one or two, with NULLs and duplicates) and random batches, looked up in one
index, in one merged from parts and in runs added part by part, find exactly the rows whose
key is the batch's; the path for batches whose keys hash alike gives the same rows, and so
does an index of the first key column alone. The process's caches keep what fits their
budget and read again a file made again under its old name."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from spark_cdc.server_plugin.sinks.apply.engine.key_index import (
    BatchKeys,
    BudgetCache,
    FileKeys,
    FileKeysCache,
    KeyRuns,
    index_of,
    key_values,
)

VALUES = st.one_of(st.none(), st.integers(-3, 6))
NAMES = st.sampled_from([["id"], ["id", "part"], ["day"], ["nested"]])


def _table(rows: list[tuple[int | None, str | None]], names: list[str]) -> pa.Table:
    ids = pa.array([r[0] for r in rows], pa.int64())
    columns = {
        "id": ids,
        "part": pa.array([r[1] for r in rows], pa.string()),
        "day": ids.cast(pa.int32()).view(pa.date32()),  # an orderable key of its own type
        "nested": pa.array(
            [None if r[0] is None else {"a": r[0], "b": r[1]} for r in rows],
            pa.struct([("a", pa.int64()), ("b", pa.string())]),
        ),
    }
    return pa.table({n: columns[n] for n in names})


def _plain(rows: pa.Table, keys: pa.Table, indexed: int | None = None) -> np.ndarray:
    """The rows whose key is one of ``keys``': a key with a NULL part (in the first
    ``indexed`` columns, those indexed) is no key."""

    def key(row: dict) -> tuple | None:
        if None in list(row.values())[:indexed]:
            return None
        return tuple(repr(v) for v in row.values())  # a struct's dict is not hashable

    wanted = {key(r) for r in keys.to_pylist()} - {None}
    return np.array([i for i, r in enumerate(rows.to_pylist()) if key(r) in wanted], np.int64)


ROWS = st.lists(st.tuples(VALUES, st.one_of(st.none(), st.sampled_from(["a", "b"]))), max_size=40)


@settings(max_examples=200, deadline=None)
@given(
    rows=ROWS,
    batch=ROWS,
    names=NAMES,
    cut=st.integers(0, 40),
    collide=st.booleans(),
    sizes=st.lists(st.integers(1, 12), max_size=6),
    dense=st.booleans(),
)
def test_an_index_finds_exactly_the_rows_of_the_batchs_keys(
    rows: list,
    batch: list,
    names: list[str],
    cut: int,
    collide: bool,
    sizes: list[int],
    dense: bool,
) -> None:
    """``dense``: the batch's keys looked up by their table of membership where they
    have one (here: integer keys), else by binary search."""
    table, keys = _table(rows, names), _table(batch, names)
    wanted = BatchKeys.of(keys, names)
    if collide:
        wanted = dataclasses.replace(wanted, collide=True)
    _looked_up(wanted, dense)
    whole = index_of(table, names)
    cut = min(cut, len(rows))
    parts = index_of(table.slice(0, cut), names).merged(index_of(table.slice(cut), names, cut))
    expected = _plain(table, keys)
    kept = FileKeys.of(table, wanted)
    assert kept.positions(wanted).tolist() == expected.tolist()
    for index in (whole, parts):
        assert FileKeys(table, index).positions(wanted).tolist() == expected.tolist()
        assert set(expected) <= set(index.find(wanted)[0].tolist())
    runs, start = KeyRuns(), 0
    for size in [*sizes, len(rows)]:
        part = table.slice(start, size)
        runs = runs.added(index_of(part, names, start))
        start += part.num_rows
    alike = np.isin(key_values(table, names), wanted.values)
    for name in names:  # a key with a NULL part is no key
        alike &= table.column(name).is_valid().to_numpy(zero_copy_only=False)
    assert runs.find(wanted).tolist() == np.flatnonzero(alike).tolist()


def _looked_up(wanted: BatchKeys, dense: bool) -> None:
    """``wanted`` looked up by binary search unless ``dense`` (its table of membership
    where it has one)."""
    if not dense:
        vars(wanted)["members"] = None  # what ``members`` gives keys spanning too many values
    elif wanted.exact_index:  # one integer or temporal key: its values span few here
        assert wanted.members is not None or not len(wanted.values)


@settings(max_examples=200, deadline=None)
@given(rows=ROWS, batch=ROWS, dense=st.booleans())
def test_an_index_of_the_first_key_column_finds_exactly_the_rows_of_both(
    rows: list, batch: list, dense: bool
) -> None:
    """Type 2's versions: indexed by their key, confirmed by ``__START_AT`` (here
    ``part``): a batch naming several versions of one key finds each, and only them."""
    names = ["id", "part"]
    table, keys = _table(rows, names), _table(batch, names)
    wanted = BatchKeys.of(keys, names, indexed=1)
    _looked_up(wanted, dense)
    expected = _plain(table, keys, indexed=1).tolist()
    assert FileKeys(table, index_of(table, names[:1])).positions(wanted).tolist() == expected
    assert FileKeys.of(table, wanted).positions(wanted).tolist() == expected


def test_a_file_made_again_under_its_old_name_is_read_again() -> None:
    """A table deleted and made again at one path may reuse a file name: its size or
    modification time tells the cached keys of the old file apart."""
    cache = FileKeysCache(budget=1 << 20)
    wanted = BatchKeys.of(_table([(1, None), (2, None)], ["id"]), ["id"])
    old = _table([(1, None), (5, None)], ["id"])
    new = _table([(7, None), (2, None), (1, None)], ["id"])
    assert cache.keys(("/t/part-0.parquet", 10, 1), lambda: old, wanted).positions(
        wanted
    ).tolist() == [0]
    again = cache.keys(("/t/part-0.parquet", 12, 2), lambda: new, wanted)
    assert again.positions(wanted).tolist() == [1, 2]


def test_a_cache_past_its_budget_keeps_what_each_round_uses_and_drops_the_oldest() -> None:
    """Three values fit. Rounds each needing the same four keep three of them (plain LRU
    would drop each before its next use: four misses a round); a round using others drops
    the least recently used."""
    made: list[str] = []
    cache: BudgetCache[str] = BudgetCache(3, lambda value: 1)

    def round_of(keys: str) -> None:
        cache.next_round()
        assert [cache.get(k, lambda k=k: made.append(k) or k) for k in keys] == list(keys)

    for _ in range(3):
        round_of("abcd")
    assert made == [*"abcd", "d", "d"]
    round_of("ae")  # e takes b's place, the least recently used
    round_of("acb")
    assert made == [*"abcd", "d", "d", "e", "b"]


def test_a_cache_travels_empty() -> None:
    """Code shipped by value to a server without the package pickles its modules' caches:
    they travel without their values (or their lock, which cannot be pickled)."""
    from pyspark import cloudpickle

    cache: BudgetCache[str] = BudgetCache(3, lambda value: 1)
    cache.get("a", lambda: "kept")
    shipped = cloudpickle.loads(cloudpickle.dumps(cache))
    assert shipped.budget == 3 and shipped.get("a", lambda: "made") == "made"


def test_a_sorted_file_of_one_integer_key_keeps_only_its_values() -> None:
    """What a worker keeps per file is its memory: a file this package wrote (sorted by
    an integer key) keeps the key's values alone, and a file of another order each row's
    position as 32 bits; neither keeps a copy of the key column to confirm matches."""
    wanted = BatchKeys.of(_table([(3, None)], ["id"]), ["id"])
    ordered = FileKeys.of(pa.table({"id": pa.array(range(1000), pa.int64())}), wanted)
    assert ordered.columns.num_columns == 0 and ordered.index.rows is None
    assert ordered.index.nbytes == 8000 and ordered.positions(wanted).tolist() == [3]
    shuffled = FileKeys.of(pa.table({"id": pa.array(range(999, -1, -1), pa.int64())}), wanted)
    assert shuffled.index.nbytes == 12000 and shuffled.positions(wanted).tolist() == [996]
