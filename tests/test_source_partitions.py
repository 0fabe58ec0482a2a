"""delta_changelog's partition plan, without a server or a cluster: how many tasks a read
becomes on a 2-core and a 64-core setting, and that a commit being resolved stays whole or
is split into hash buckets that each hold a bounded share of it."""

from __future__ import annotations

from collections import Counter

import pytest
from spark_cdc.server_plugin.delta.file_tasks import FileGroup, FileTask
from spark_cdc.server_plugin.delta.options import parse_source_options
from spark_cdc.server_plugin.delta.partitions import (
    FILE_OPEN_COST,
    MAX_SPREAD,
    RESOLVE_BUCKET_BYTES,
    plan_partitions,
)
from spark_cdc.server_plugin.errors import ChangelogSourceError
from spark_cdc.server_plugin.row_level import RowLevelRules

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


@pytest.mark.parametrize(("cores", "buckets"), [(2, 2), (64, MAX_SPREAD)])
def test_a_large_rewrite_is_split_by_row_id_over_the_cores(cores: int, buckets: int) -> None:
    tasks = _rewrite(1, 10, 5 * MB)  # 100 MB: 1M deletes + 1M inserts of a narrow table
    groups = plan_partitions(tasks, cores, UPDATES)
    assert len(groups) == buckets
    assert sorted(g.bucket for g in groups) == list(range(buckets))
    assert all(g.resolve and g.buckets == buckets and g.files == tuple(tasks) for g in groups)
    _each_file_once(tasks, groups)


@pytest.mark.parametrize("cores", [2, 64])
def test_a_huge_commit_keeps_every_task_within_its_memory_bound(cores: int) -> None:
    tasks = _rewrite(7, 40, 10 * MB)  # 800 MB of data files in one commit
    groups = plan_partitions(tasks, cores, CARRYOVERS)
    count = groups[0].buckets
    assert len(groups) == count >= 13  # 800 MB / 64 MB per task
    assert _bytes(groups[0]) / count <= RESOLVE_BUCKET_BYTES  # each task's share of the rows
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


def test_commits_that_need_no_work_are_read_like_a_raw_feed() -> None:
    appends = [t for v in range(4) for t in _files(v, 30, 5 * MB, "insert")]
    groups = plan_partitions(appends, 64, CARRYOVERS)
    assert not any(g.resolve for g in groups)  # inserts only: no carry-over is possible
    assert len(groups) > 4  # and files of one commit may go to different tasks
    _each_file_once(appends, groups)
    # Update detection checks every commit for a row id changed twice: all resolved.
    assert all(g.resolve for g in plan_partitions(appends, 64, UPDATES))
    # A commit with change data files may hold anything.
    cdc = _files(9, 2, MB, None)
    assert all(g.resolve for g in plan_partitions(cdc, 2, CARRYOVERS))


def test_parallelism_option() -> None:
    assert parse_source_options({"path": "/t"}).parallelism is None  # the driver's cores
    assert parse_source_options({"path": "/t", "parallelism": "64"}).parallelism == 64
    with pytest.raises(ChangelogSourceError, match=r"INVALID_OPTION.*'parallelism'"):
        parse_source_options({"path": "/t", "parallelism": "0"})


def test_resolution_options_follow_spark_and_check_in_its_order() -> None:
    raw = parse_source_options({"path": "/t", "rowId": "id"})
    assert not raw.resolves  # without deduplicationMode/computeUpdates: the raw feed
    both = parse_source_options({"path": "/t", "rowId": "a, k.b", "computeUpdates": "TRUE"})
    assert (both.drop_carryovers, both.compute_updates, both.row_id) == (True, True, ("a", "k.b"))
    for options, condition in [
        ({"deduplicationMode": "all"}, "INVALID_CDC_OPTION.INVALID_DEDUPLICATION_MODE"),
        ({"deduplicationMode": "netChanges"}, "DELTA_CHANGELOG.INVALID_OPTION"),
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
