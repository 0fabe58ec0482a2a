"""A batch's rows are written in key order whatever order they came in (``columns.by_key``:
tight key ranges in each file's statistics, one pass for the key index). One integer key is
grouped by a sort numbered in its order (``history._key_groups``), so the rows a batch
resolves come out in key order and are not sorted a second time
(``row_level.arrays.ordered_integers`` says which keys; an integer sequence is ranked the
same way, ``history.dense_ranks``). The changes of a key are then ordered by a sort that
need not be stable (``history._slot_order``), in the order a stable one gives."""

from __future__ import annotations

import random
import tempfile
from datetime import date
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spark_cdc.server_plugin.row_level.arrays import ordered_integers
from spark_cdc.server_plugin.sinks.apply.engine.history import (
    _key_groups,
    _slot_order,
    sequence_ranks,
)

from tests.support.apply_feeds import expected
from tests.support.apply_model import Change
from tests.support.apply_targets import applied_in_tasks, read_table, sorted_rows, spec_for

_INT64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(_INT64, max_size=30))
def test_ordered_integers_order_as_their_column(values: list[int]) -> None:
    """int64, int32, dates and timestamps come back as int64 in their own order."""
    columns = [
        pa.array(values, pa.int64()),
        pa.array([v % 2**31 - 2**30 for v in values], pa.int32()),
        pa.array([date.fromordinal(1 + v % 700_000) for v in values], pa.date32()),
        pa.array([v // 1000 for v in values], pa.timestamp("us", "UTC")),
    ]
    for column in columns:
        found = ordered_integers(column)
        assert found is not None and found.dtype == np.int64
        python = column.to_pylist()
        expected = sorted(range(len(python)), key=lambda i: (python[i], i))
        assert np.argsort(found, kind="stable").tolist() == expected


@pytest.mark.parametrize(
    "column",
    [
        pa.array([1, None, 3], pa.int64()),
        pa.array([1, 2], pa.uint64()),
        pa.array([True, False]),
        pa.array(["b", "a"]),
        pa.array([1.5, 0.5]),
    ],
)
def test_other_columns_have_no_ordered_integers(column: pa.Array) -> None:
    """NULLs, unsigned integers (their high half would order as negative numbers),
    booleans, text and floating-point numbers are grouped and sorted as before."""
    assert ordered_integers(column) is None


def _changes(keys: list[object], key_type: pa.DataType) -> pa.Table:
    return pa.table({"id": pa.array(keys, key_type)})


def _grouped(changes: pa.Table) -> np.ndarray:
    return _key_groups(changes, spec_for("/unused", 1))


@settings(max_examples=60, deadline=None)
@given(keys=st.lists(st.integers(-50, 50), max_size=40))
def test_integer_keys_are_numbered_in_their_order(keys: list[int]) -> None:
    """Changes of one key share a group, and groups number the keys in ascending order."""
    ids = _grouped(_changes(keys, pa.int64()))
    for i, a in enumerate(keys):
        for j, b in enumerate(keys):
            assert (ids[i] < ids[j]) == (a < b)
            assert (ids[i] == ids[j]) == (a == b)


def test_other_keys_are_grouped_as_before() -> None:
    """Text keys: changes of one key share a group, other keys' groups differ (the hash
    grouping, numbered as the keys first appear)."""
    keys = ["b", "a", "b", "c", "a"]
    assert _grouped(_changes(keys, pa.string())).tolist() == [0, 1, 0, 2, 1]


@pytest.mark.parametrize("scd_type", [1, 2])
def test_a_batch_in_any_order_is_written_in_key_order(scd_type: int) -> None:
    """A first load of shuffled keys (some changed twice, some deleted) resolved by two
    tasks: every file of the target and of its state holds its keys in ascending order,
    and the target holds the model's rows."""
    rng = random.Random(7)
    feed = [Change((k,), (1,), "upsert", {"a": k, "b": "xy"[k % 2]}) for k in range(-60, 140)]
    feed += [Change((k,), (2,), "upsert", {"a": -k, "b": "z"}) for k in range(0, 140, 3)]
    feed += [Change((k,), (3,), "delete") for k in range(0, 140, 7)]
    rng.shuffle(feed)
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type, key_buckets=2)
        applied_in_tasks(spec, feed, 0, 2, hashed=True)
        for table in (spec.target, spec.state):
            files = [p for p in Path(table).rglob("*.parquet") if "_delta_log" not in str(p)]
            assert files
            for file in files:
                keys = pq.read_table(file, columns=["id"]).column("id").to_pylist()
                assert keys == sorted(keys), file
        assert sorted_rows(read_table(spec.target)) == expected(feed, spec)


@settings(max_examples=100, deadline=None)
@given(
    changes=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 2), st.integers(0, 2)),
        min_size=1,
        max_size=40,
    ),
    new=st.data(),
)
def test_changes_are_ordered_by_key_sequence_kind_identity_origin_then_row(
    changes: list[tuple[int, int, int, int]], new: st.DataObject
) -> None:
    """Whatever sort finds the slots, the order is (key, sequence, kind, identity, origin)
    with ties in row order, and each slot's first change is marked."""
    group, ranks, op, identity = (np.array(c, np.int64) for c in zip(*changes, strict=True))
    fresh = np.array(
        new.draw(st.lists(st.booleans(), min_size=len(changes), max_size=len(changes)))
    )
    rows = np.arange(len(changes))
    order, slot_start = _slot_order(group, ranks, op.astype(np.int8), identity, fresh)
    expected = np.lexsort((rows, fresh, identity, op, ranks, group))
    assert order.tolist() == expected.tolist()
    slots = list(zip(group[order], ranks[order], strict=True))
    assert slot_start.tolist() == [i == 0 or slots[i] != slots[i - 1] for i in range(len(slots))]


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.integers(-5, 5), min_size=1, max_size=30))
def test_sequences_rank_densely_by_either_path(values: list[int]) -> None:
    """An integer sequence (ranked by ``dense_ranks``) and a two-part one whose first part
    is constant (ranked by Arrow's sort) give each value its place among the distinct
    values."""
    expected = [sorted(set(values)).index(v) for v in values]
    table = pa.table({"seq": pa.array(values, pa.int64()), "zero": pa.array([0] * len(values))})
    assert sequence_ranks(table, ("seq",)).tolist() == expected
    assert sequence_ranks(table, ("zero", "seq")).tolist() == expected
