"""The state laid out by key bucket (``sinks.apply.buckets``) on real Delta tables: every row
of a key in its hash's bucket through every write (tasks' staged files, the commit's appends,
type 1's compaction, type 2's merge of small files), a task reading only the buckets of its
keys, and a state made before the layout kept as it is. (That the result is the model's, in
every layout and split of tasks, is test_apply_model.py's.)"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from hypothesis import given, settings
from hypothesis import strategies as st
from spark_cdc.server_plugin.errors import ChangelogSourceError
from spark_cdc.server_plugin.sinks.apply.engine import buckets
from spark_cdc.server_plugin.sinks.apply.engine.history import APPLIED_AT
from spark_cdc.server_plugin.sinks.apply.engine.spec import BUCKET, KEY_HASH, ApplySpec
from spark_cdc.server_plugin.sinks.apply.task import apply_batch, apply_shares, resolve_share

from tests.support.apply_model import Change
from tests.support.apply_targets import key_hash, prepared, read_table, sorted_rows, spec_for


def _changes(keys: list[int], sequence: int) -> list[Change]:
    return [Change((k,), (sequence,), "upsert", {"a": k % 5, "b": "x"}) for k in keys]


def _apply_in_tasks(spec: ApplySpec, changes: list[Change], version: int, tasks: int) -> None:
    """``changes`` split among ``tasks`` by their keys' hash, as Spark's ``repartition``."""
    shares = [[c for c in changes if key_hash(c.key[0]) % tasks == t] for t in range(tasks)]
    resolved = [resolve_share(spec, prepared(s, hashed=True)) for s in shares if s]
    apply_shares(spec, resolved, version)


def _files_by_bucket(path: str) -> dict[int, list[str]]:
    """The state's data files by the bucket their add action says."""
    table = DeltaTable(path)
    adds = pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=True)).read_all()
    found: dict[int, list[str]] = {}
    for row in adds.select(["path", f"partition.{BUCKET}"]).to_pylist():
        found.setdefault(int(row[f"partition.{BUCKET}"]), []).append(row["path"])
    return found


def _assert_laid_out(path: str, count: int) -> None:
    """Every file of the state holds only rows whose key hashes to its bucket, and the
    state says how many buckets it has."""
    table = DeltaTable(path)
    assert buckets.Layout.of(table) == buckets.Layout(keeps_hash=True, buckets=count)
    for bucket, files in _files_by_bucket(path).items():
        for file in files:
            hashes = pq.read_table(os.path.join(path, file), columns=[KEY_HASH]).column(KEY_HASH)
            assert set(np.mod(hashes.to_numpy().astype(np.int64), count)) == {bucket}


def test_hashes_fall_in_buckets_as_spark_pmod_places_them() -> None:
    hashes = np.array([-7, -1, 0, 5, 2**31 - 1, -(2**31)], np.int32)
    assert buckets.of(hashes, 3).tolist() == [2, 2, 0, 2, 1, 1]  # pmod: never negative


@settings(max_examples=10, deadline=None)
@given(scd_type=st.sampled_from([1, 2]), tasks=st.integers(1, 4), seed=st.integers(0, 1000))
def test_every_write_keeps_each_key_in_its_hashs_bucket(
    scd_type: int, tasks: int, seed: int
) -> None:
    """The first batch makes the state (in 3 buckets, whatever the tasks), later ones
    append the tasks' staged files; type 1 compacts after every batch, type 2 merges its
    small files."""
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, scd_type, key_buckets=3, compact_after_files=2)
        for version in range(4):
            keys = rng.choice(200, 40, replace=False).tolist()
            _apply_in_tasks(spec, _changes(keys, version), version, tasks)
            _assert_laid_out(spec.state, 3)


@pytest.mark.parametrize("scd_type", [1, 2])
def test_a_task_reads_only_the_buckets_its_keys_are_in(scd_type: int) -> None:
    """A share whose keys all hash to one bucket resolves alike from a copy of the tables
    without the other buckets' files: it never opens them. (A copy: a process keeps what
    it read of a file by its location.)"""
    with tempfile.TemporaryDirectory() as folder:
        whole, pruned = Path(folder, "whole"), Path(folder, "pruned")
        spec = spec_for(str(whole), scd_type, key_buckets=3)
        _apply_in_tasks(spec, _changes(list(range(60)), 0), 0, 3)
        _apply_in_tasks(spec, _changes(list(range(30, 90)), 1), 1, 3)
        shutil.copytree(whole, pruned)
        other = spec_for(str(pruned), scd_type, key_buckets=3)
        for bucket, files in _files_by_bucket(other.state).items():
            for file in files if bucket != 1 else []:
                os.unlink(os.path.join(other.state, file))
        again = _changes(list(range(90)), 1)  # not later than all: type 1 reads the state
        changes = [c for c in again if key_hash(c.key[0]) % 3 == 1]
        before = resolve_share(spec, prepared(changes, hashed=True)).resolution
        after = resolve_share(other, prepared(changes, hashed=True)).resolution
        assert before.replaced.num_rows > 0  # the share's keys were found in the state
        for name in ("replaced", "rows", "state", "kept"):
            left, right = (getattr(r, name) for r in (before, after))
            if name == "state":  # stamped when resolved
                left, right = left.drop_columns([APPLIED_AT]), right.drop_columns([APPLIED_AT])
            assert left.equals(right)


def test_a_state_made_before_the_layout_keeps_its_own() -> None:
    """A state made by batches without key hashes keeps neither hashes nor buckets when
    planned batches follow; the target is what it would be."""
    with tempfile.TemporaryDirectory() as folder:
        spec = spec_for(folder, 1, key_buckets=2)
        apply_batch(spec, prepared(_changes(list(range(20)), 0)), 0)
        _apply_in_tasks(spec, _changes(list(range(10, 30)), 1), 1, 2)
        apply_batch(spec, prepared(_changes(list(range(25, 35)), 2), hashed=True), 2)
        state = DeltaTable(spec.state)
        assert buckets.Layout.of(state) == buckets.Layout(keeps_hash=False, buckets=None)
        assert state.metadata().partition_columns == []
        expected = [{"id": k, "a": k % 5, "b": "x"} for k in range(35)]
        assert sorted_rows(read_table(spec.target)) == sorted_rows(pa.Table.from_pylist(expected))


def test_a_state_keeping_hashes_refuses_a_batch_without_them_before_writing(
    tmp_path: Path,
) -> None:
    spec = spec_for(str(tmp_path), 1, key_buckets=2)
    apply_batch(spec, prepared(_changes([1, 2], 0), hashed=True), 0)
    version = DeltaTable(spec.target).version()
    with pytest.raises(ChangelogSourceError, match="no key hashes") as refused:
        apply_batch(spec, prepared(_changes([3], 1)), 1)
    assert refused.value.condition == "APPLY_CHANGES.INTERNAL_ERROR"
    assert DeltaTable(spec.target).version() == version
