"""delta_changelog's partition plan, without a server or a cluster: how many tasks a read
becomes on a 2-core and a 64-core setting, that a commit being resolved stays whole or is
split into hash buckets that each hold a bounded share of it, and (the source's reader run
in this process) that the split serves exactly what one task per commit serves."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import example, given
from hypothesis import strategies as st
from spark_cdc.server_plugin.changefeed.partitions import (
    FILE_OPEN_COST,
    MAX_SPREAD,
    MIN_PART,
    RESOLVE_BYTES,
    FileGroup,
    plan_partitions,
)
from spark_cdc.server_plugin.delta.file_reader import split_row_groups
from spark_cdc.server_plugin.delta.file_tasks import FileTask
from spark_cdc.server_plugin.delta.options import parse_delta_options as parse_source_options
from spark_cdc.server_plugin.delta.source import DeltaChangelogSource
from spark_cdc.server_plugin.errors import ChangelogSourceError
from spark_cdc.server_plugin.row_level.rules import RowLevelRules

from tests.support.delta_dv_tables import DvTable
from tests.support.delta_tables import big_rows

MB = 1 << 20
CARRYOVERS = RowLevelRules((("id",),), carryover_removal=True, update_detection=False)
UPDATES = RowLevelRules((("id",),), carryover_removal=True, update_detection=True)


def _files(version: int, count: int, size: int, kind: str | None) -> list[FileTask]:
    return [
        FileTask(f"v{version}-{kind}-{i}.parquet", kind, version, 0, (), size) for i in range(count)
    ]


def _rewrite(version: int, files: int, size: int) -> list[FileTask]:
    """A copy-on-write commit: ``files`` removed and as many added."""
    return _files(version, files, size, "delete") + _files(version, files, size, "insert")


def _each_file_once(tasks: list[FileTask], groups: list[FileGroup]) -> None:
    """Every file is read once, or once per bucket of its commit."""
    groups = [g for g in groups if not g.check_only]
    reads = Counter(f for g in groups for f in g.files)
    buckets = {f: g.buckets for g in groups for f in g.files}
    assert reads == Counter({t: buckets[t] for t in tasks})


def _bytes(group: FileGroup) -> int:
    return sum(f.size + FILE_OPEN_COST for f in group.files)


@pytest.mark.parametrize(("cores", "partitions"), [(2, 8), (64, 64)])
def test_a_raw_read_spreads_over_the_cores(cores: int, partitions: int) -> None:
    tasks = [t for v in range(100) for t in _files(v, 1, 10 * MB, "insert")]  # ~1 GB
    groups = plan_partitions(tasks, cores)
    assert len(groups) == partitions  # 128 MB each on 2 cores; a 64th of the read on 64
    _each_file_once(tasks, groups)
    assert [f for g in groups for f in g.files] == tasks  # consecutive, in commit order
    assert not any(g.resolve for g in groups)


@pytest.mark.parametrize("cores", [2, 64])
def test_a_small_read_is_one_task(cores: int) -> None:
    tasks = [t for v in range(10) for t in _files(v, 1, 100_000, "insert")]
    assert len(plan_partitions(tasks, cores, CARRYOVERS)) == 1


@pytest.mark.parametrize(("cores", "buckets"), [(2, 2), (64, 2)])
def test_a_large_rewrite_is_split_by_row_id_over_the_cores(cores: int, buckets: int) -> None:
    tasks = _rewrite(1, 10, 5 * MB)  # 100 MB: 1M deletes + 1M inserts of a narrow table
    groups = plan_partitions(tasks, cores, UPDATES)  # no more buckets than 64 MB shares
    assert len(groups) == buckets
    assert sorted(g.bucket for g in groups) == list(range(buckets))
    assert all(g.resolve and g.buckets == buckets and g.files == tuple(tasks) for g in groups)
    _each_file_once(tasks, groups)


@pytest.mark.parametrize("cores", [2, 64])
def test_a_rewrite_one_task_resolves_at_once_is_not_split(cores: int) -> None:
    """40 MB: more than a 2-core share of the read, less than ``resolveTaskBytes``."""
    tasks = _rewrite(1, 4, 5 * MB)
    groups = plan_partitions(tasks, cores, UPDATES)
    assert [(g.files, g.resolve, g.buckets, g.spill) for g in groups] == [
        (tuple(tasks), True, 1, 1)
    ]
    split = plan_partitions(tasks, cores, UPDATES, resolve_bytes=16 * MB)
    assert len(split) == min(cores, 3)


@pytest.mark.parametrize(("cores", "tasks"), [(2, 2), (64, MAX_SPREAD)])
def test_a_huge_commit_is_read_a_bounded_number_of_times_in_bounded_memory(
    cores: int, tasks: int
) -> None:
    commit = _rewrite(7, 40, 10 * MB)  # 800 MB of data files in one commit
    groups = plan_partitions(commit, cores, CARRYOVERS)
    assert len(groups) == tasks  # each reads the commit once: at most MAX_SPREAD reads
    _each_file_once(commit, groups)
    for group in groups:  # each task's share, in parts on local disk, each within the budget
        assert _bytes(group) / group.buckets / group.spill <= RESOLVE_BYTES
        assert group.spill > 1
    small = plan_partitions(commit, cores, CARRYOVERS, resolve_bytes=16 * MB)
    assert all(_bytes(g) / g.buckets / g.spill <= 16 * MB for g in small)


@pytest.mark.parametrize(("cores", "buckets"), [(2, 1), (4, 1), (6, 2), (64, 4)])
def test_large_rewrites_share_the_cores_before_a_commit_is_split(cores: int, buckets: int) -> None:
    """Three 250 MB rewrites: a bucket is one more read of its commit, so a commit only
    takes the cores the other rewrites leave (whole commits first)."""
    tasks = [t for v in (1, 2, 3) for t in _rewrite(v, 5, 25 * MB)]
    groups = plan_partitions(tasks, cores, UPDATES)
    assert len(groups) == 3 * buckets
    assert all(g.resolve and g.buckets == buckets for g in groups)
    for version in (1, 2, 3):
        mine = [g for g in groups if g.files[0].version == version]
        assert sorted(g.bucket for g in mine) == list(range(buckets))
    _each_file_once(tasks, groups)


@pytest.mark.parametrize(("cores", "partitions"), [(2, 2), (64, 50)])
def test_many_commits_are_packed_whole(cores: int, partitions: int) -> None:
    """A stream catching up: commits are never cut, small ones share a task."""
    tasks = [t for v in range(100) for t in _rewrite(v, 1, MB - FILE_OPEN_COST)]  # 2 MB each
    groups = plan_partitions(tasks, cores, UPDATES)
    assert len(groups) == partitions
    assert all(g.resolve and g.buckets == 1 for g in groups)
    owner = {}
    for index, group in enumerate(groups):
        for task in group.files:
            assert owner.setdefault(task.version, index) == index, "a commit was cut"
    _each_file_once(tasks, groups)


def test_small_commits_fill_the_cores_evenly() -> None:
    """20 rewrites of 270 KB on 2 cores: two tasks of ten commits, not a third task with the
    commit that did not fit (next-fit packing's straggler)."""
    tasks = [t for v in range(20) for t in _rewrite(v, 1, 140_000)]
    groups = plan_partitions(tasks, 2, UPDATES)
    assert [sorted({t.version for t in g.files}) for g in groups] == [
        list(range(10)),
        list(range(10, 20)),
    ]
    assert all(g.resolve_bytes == RESOLVE_BYTES for g in groups)


def test_commits_that_need_no_work_are_read_like_a_raw_feed() -> None:
    appends = [t for v in range(4) for t in _files(v, 30, 5 * MB, "insert")]
    groups = plan_partitions(appends, 64, CARRYOVERS)
    assert not any(g.resolve for g in groups)  # inserts only: no carry-over is possible
    assert len(groups) > 4  # and files of one commit may go to different tasks
    _each_file_once(appends, groups)
    # A change data file may hold anything: resolved.
    cdc = _files(9, 2, MB, None)
    assert all(g.resolve for g in plan_partitions(cdc, 2, CARRYOVERS))


def test_a_large_append_under_update_detection_is_read_once_and_checked_by_row_id() -> None:
    """Its rows pass unchanged; check tasks read only the row id for a row id twice."""
    appends = [t for v in range(4) for t in _files(v, 30, 5 * MB, "insert")]
    groups = plan_partitions(appends, 64, UPDATES, key_share=0.1)
    served = [g for g in groups if not g.check_only]
    assert not any(g.resolve for g in served)
    assert Counter(f for g in served for f in g.files) == Counter(appends)  # read once
    checks = [g for g in groups if g.check_only]
    for version in range(4):
        buckets = [g for g in checks if g.files[0].version == version]
        assert sorted(g.bucket for g in buckets) == list(range(len(buckets)))
        assert all(len(g.files) == 30 and g.resolve for g in buckets)
    # Small appends are simply resolved whole.
    few = [t for v in range(4) for t in _files(v, 1, MB, "insert")]
    assert all(g.resolve and not g.check_only for g in plan_partitions(few, 2, UPDATES))


def test_parallelism_option() -> None:
    assert parse_source_options({"path": "/t"}).parallelism is None  # the driver's cores
    assert parse_source_options({"path": "/t", "parallelism": "64"}).parallelism == 64
    with pytest.raises(
        ChangelogSourceError, match=r"INVALID_CDC_OPTION.INVALID_NUMBER.*'parallelism'"
    ):
        parse_source_options({"path": "/t", "parallelism": "0"})


def test_resolution_options_follow_spark_and_check_in_its_order() -> None:
    raw = parse_source_options({"path": "/t", "rowId": "id"})
    assert not raw.resolves  # without deduplicationMode/computeUpdates: the raw feed
    both = parse_source_options({"path": "/t", "rowId": "a, k.b", "computeUpdates": "TRUE"})
    assert (both.drop_carryovers, both.compute_updates, both.row_id) == (True, True, ("a", "k.b"))
    for options, condition in [
        ({"deduplicationMode": "all"}, "INVALID_CDC_OPTION.INVALID_DEDUPLICATION_MODE"),
        ({"deduplicationMode": "netChanges"}, "INVALID_CDC_OPTION.NET_CHANGES_IN_SOURCE"),
        (
            {"deduplicationMode": "none", "computeUpdates": "true"},
            "INVALID_CDC_OPTION.UPDATE_DETECTION_REQUIRES_CARRY_OVER_REMOVAL",
        ),
        ({"computeUpdates": "true"}, "INVALID_CHANGELOG_SCHEMA.MISSING_ROW_ID"),
        ({"computeUpdates": "yes", "rowId": "id"}, "INVALID_CDC_OPTION.INVALID_BOOLEAN"),
    ]:
        with pytest.raises(ChangelogSourceError) as caught:
            parse_source_options({"path": "/t", **options})
        assert caught.value.condition == condition, options


# -- the plan's tasks, read in this process: buckets, spill parts and check tasks serve
# exactly what one task per commit serves ------------------------------------------------


def _served(path: str, **options: str) -> tuple[list[FileGroup], list[dict[str, Any]]]:
    source = DeltaChangelogSource({"path": path, **options})
    reader = source.reader(source.schema())
    groups = list(reader.partitions())
    rows = [r for g in groups for b in reader.read(g) for r in b.to_pylist()]
    return groups, sorted(rows, key=repr)


@pytest.mark.slow  # writes and reads a 150k-row table: about 3 s, idle
def test_buckets_and_spilled_parts_serve_what_one_task_serves(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, big_rows(range(150_000), 1))
    DeltaTable(path).update({"n": "n + 1"}, predicate="id % 10 = 3")  # copy-on-write: 6 MB
    DeltaTable(path).delete("id % 100 = 7")
    options = {"rowId": "id", "computeUpdates": "true", "startingVersion": "1"}
    whole_groups, whole = _served(path, parallelism="1", **options)
    assert all(g.buckets == 1 and g.spill == 1 for g in whole_groups)
    split_groups, split = _served(path, parallelism="4", resolveTaskBytes="1m", **options)
    assert max(g.buckets for g in split_groups) > 1 and max(g.spill for g in split_groups) > 1
    assert split == whole
    kinds = Counter(r["_change_type"] for r in whole)
    assert kinds == {"update_preimage": 15_000, "update_postimage": 15_000, "delete": 1_500}


def test_small_commits_resolved_together_serve_what_each_alone_serves(tmp_path: Path) -> None:
    """A task resolves its small commits in one pass (``resolveTaskBytes`` bounds how many):
    every row keeps its own commit's version and timestamp, and a row id changed twice is
    reported with its own commit's version."""
    path = str(tmp_path / "t")
    write_deltalake(path, big_rows(range(300), 1))
    for version in range(1, 8):  # copy-on-write rewrites: carry-overs, updates, deletes
        DeltaTable(path).update({"n": "n + 1"}, predicate=f"id % 7 = {version - 1}")
        DeltaTable(path).delete(f"id % 50 = {version}")
    options = {"rowId": "id", "computeUpdates": "true", "startingVersion": "1"}
    together_groups, together = _served(path, parallelism="1", **options)
    assert len(together_groups) == 1 and len(together_groups[0].files) > 14
    _, alone = _served(path, parallelism="1", resolveTaskBytes="1k", **options)
    assert together == alone
    assert {r["_commit_version"] for r in together} == set(range(1, 15))
    stamps = {r["_commit_version"]: r["_commit_timestamp"] for r in together}
    assert len({(r["_commit_version"], r["_commit_timestamp"]) for r in together}) == 14
    assert sorted(stamps.values()) == [stamps[v] for v in sorted(stamps)]
    twice = big_rows(range(5), 2)
    write_deltalake(path, pa.concat_tables([twice, twice.slice(3, 1)]), mode="append")
    with pytest.raises(ChangelogSourceError) as caught:
        _served(path, parallelism="1", **options)
    assert caught.value.parameters == {"version": "15", "deletes": "0", "inserts": "2"}


@pytest.mark.slow  # writes and reads a 150k-row table: about 3 s, idle
def test_check_tasks_find_a_row_id_twice_in_a_large_append(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, big_rows(range(10), 1))
    twice = big_rows(range(150_000), 2)
    write_deltalake(path, pa.concat_tables([twice, twice.slice(77, 1)]), mode="append")
    options = {"rowId": "id", "computeUpdates": "true", "startingVersion": "1"}
    source = DeltaChangelogSource({"path": path, **options, "parallelism": "4"})
    reader = source.reader(source.schema())
    groups = list(reader.partitions())
    assert any(g.check_only for g in groups) and any(not g.resolve for g in groups)
    with pytest.raises(ChangelogSourceError) as caught:
        for group in groups:
            served = list(reader.read(group))
            assert not group.check_only or not served  # a check task serves nothing
    assert caught.value.parameters == {"version": "1", "deletes": "0", "inserts": "2"}
    plain = {**options, "computeUpdates": "false"}  # carry-over removal alone: two inserts pass
    assert len(_served(path, **plain)[1]) == 150_001


# -- a large file read as it is: split by row groups -----------------------------------------


class _Groups:
    """Parquet metadata's row groups, as ``split_row_groups`` reads them."""

    def __init__(self, sizes: list[int]) -> None:
        self.num_row_groups = len(sizes)
        self._sizes = sizes

    def row_group(self, group: int) -> Any:
        return SimpleNamespace(total_byte_size=self._sizes[group])


@given(
    st.lists(st.integers(0, 10_000), max_size=40),
    st.lists(st.floats(0.0, 1.0, exclude_min=True, exclude_max=True), max_size=10),
)
def test_a_files_spans_read_each_row_group_once_in_order(
    sizes: list[int], cuts: list[float]
) -> None:
    edges = [0.0, *sorted(set(cuts)), 1.0]
    spans = list(itertools.pairwise(edges))
    shares = [split_row_groups(_Groups(sizes), span) for span in spans]
    if len(spans) == 1:
        assert shares == [None]  # the whole file
        return
    assert [g for share in shares for g in share or []] == list(range(len(sizes)))


@example(sizes=[61976494, 6210461, 35394153, 61514802], cores=3)  # a part left at both ends
@given(
    st.lists(st.integers(1, 200 * MB), min_size=1, max_size=30),
    st.integers(1, 64),
)
def test_split_files_fill_every_partition_evenly(sizes: list[int], cores: int) -> None:
    """Each partition holds its share of the bytes, within the parts not cut off at either
    end (each under ``MIN_PART`` of a share) and the files' open costs; every file is read
    whole, once, in order."""
    tasks = [FileTask(f"f{i}", "insert", i, 0, (), size) for i, size in enumerate(sizes)]
    groups = plan_partitions(tasks, cores, split=True)
    width = sum(t.size + FILE_OPEN_COST for t in tasks) / len(groups)
    slack = 2 * width * MIN_PART + FILE_OPEN_COST * len(tasks)
    assert all(abs(_bytes(g) - width) <= slack + 1 for g in groups)
    parts = [f for g in groups for f in g.files]
    assert [path for path, _ in itertools.groupby(f.path for f in parts)] == [t.path for t in tasks]
    for task in tasks:
        spans = [f.span for f in parts if f.path == task.path]
        assert spans[0][0] == 0.0 and spans[-1][1] == 1.0  # covered end to end
        assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))  # without a gap


def test_a_large_file_read_as_it_is_is_split_over_the_cores() -> None:
    tasks = _files(0, 1, 100 * MB, "insert") + _files(1, 1, 34 * MB, "insert")
    groups = plan_partitions(tasks, 2, split=True)
    assert [[(f.path, f.span) for f in g.files] for g in groups] == [
        [("v0-insert-0.parquet", (0.0, pytest.approx(0.67, abs=0.01)))],
        [
            ("v0-insert-0.parquet", (pytest.approx(0.67, abs=0.01), 1.0)),
            ("v1-insert-0.parquet", (0.0, 1.0)),
        ],
    ]
    unsplit = plan_partitions(tasks, 2)  # a reader that does not split files (Iceberg's)
    assert [len(g.files) for g in unsplit] == [1, 1]
    resolving = plan_partitions(_rewrite(0, 1, 100 * MB), 2, CARRYOVERS, split=True)
    assert all(f.span == (0.0, 1.0) for g in resolving for f in g.files)  # rows meet


@pytest.mark.slow  # writes and reads a 300k-row file: about 3 s, idle
def test_a_split_file_serves_what_one_task_serves(tmp_path: Path) -> None:
    """A 300k-row file of 30 row groups, inserted, then rows marked deleted across its row
    groups (a deletion vector: rows counted by position in every part)."""
    path = str(tmp_path / "t")
    table = DvTable(path, big_rows(range(-1, 0), 1))
    table.commit("WRITE", new_data=big_rows(range(300_000), 2), row_group_size=10_000)
    (big,) = [f for f in table.files if table.files[f]["size"] > 4 * MB]
    marked = [0, 9_999, 10_000, 150_001, 299_999]
    table.commit("DELETE", {big: marked})
    whole_groups, whole = _served(path, parallelism="1", startingVersion="1")
    split_groups, split = _served(path, parallelism="8", startingVersion="1")
    assert all(f.span == (0.0, 1.0) for g in whole_groups for f in g.files)
    assert sum(f.span != (0.0, 1.0) for g in split_groups for f in g.files) > 2
    assert split == whole
    deleted = sorted(r["id"] for r in whole if r["_change_type"] == "delete")
    assert deleted == marked and len(whole) == 300_000 + len(marked)
