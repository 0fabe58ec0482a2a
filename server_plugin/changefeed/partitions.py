"""How a source's data files become Spark partitions, as many as the cluster can run at once.

``parallelism`` is the number of tasks the cluster runs at once (its executors' cores; the
``parallelism`` option, else the driver's cores, which is right for a local server). A read
is cut into partitions of about ``total bytes / parallelism``, 4 to 128 MB of data files
each, every file counted with an open cost of 128 KB: enough partitions to keep every core
busy, few enough that per-task costs (a Python worker's garbage collection after each task,
20-40 ms) do not swamp tables of many small files.

When the source resolves the row-level passes, a commit is the unit: the rows of one row id
in one commit must meet in one task.

- Commits that need no work (only inserts or only deletes, without update detection) are
  read like a raw feed.
- Small commits are packed whole into partitions, cut at even shares of their running
  total (as files are, below), and a task resolves consecutive small commits together,
  up to ``GATHER_BYTES`` (or ``resolve_bytes``, if smaller) at once: the passes' fixed
  work is paid once per gathering, not once per commit.
- A large commit of one kind under update detection (an append, a stream's first snapshot)
  only needs the check that no row id appears twice: its rows are read like a raw feed, and
  separate check tasks read just the row id columns, split by a hash of the row id.
- A large commit holding both deletes and inserts (a copy-on-write rewrite) is split into
  ``buckets`` by a hash of the row id: every bucket's task reads all of the commit's files
  and keeps its own rows. Each extra bucket costs one more read of the commit and buys a
  core, so a commit is only spread over cores no other large rewrite of the read needs
  (the cores divided among them: three 250 MB rewrites of the 50-column benchmark table
  on 2 cores read in 4.0 s as three whole tasks, in 4.6 s as two buckets each),
  only when it is larger than ``resolve_bytes`` (what one task resolves at once: 64 MB of
  data files by default, the ``resolveTaskBytes`` option), and over at most
  ``MAX_SPREAD`` buckets: past those a bucket's reading (the whole commit) outweighs the
  resolving it saves. A task whose share is still larger than ``resolve_bytes`` splits it
  again by another hash into ``spill`` parts written to local disk and resolves them one
  by one.

So a resolving task holds at most ``resolve_bytes`` of data files' worth of rows, however
large the commit, and reads a commit at most ``MAX_SPREAD`` times.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pyspark.sql.datasource import InputPartition
from spark_cdc.server_plugin.row_level.rules import RowLevelRules

MAX_PARTITION_BYTES = 128 << 20
MIN_PARTITION_BYTES = 4 << 20  # Spark's floor too: a small read is one task, in log order
FILE_OPEN_COST = 128 << 10
RESOLVE_BYTES = 64 << 20
MAX_SPREAD = 8
# Commits are resolved together only while small: gathering saves a commit's fixed work
# (about 2 ms), but a task emits nothing until its gathering is resolved, and Spark waits
# meanwhile. In one run of the delta_batch benchmark (5 columns, gathering up to 64 MB),
# four 100k-row commits of 3 MB at a time read at 1.24x the raw feed (1.05x one by one, the
# run before), three 1M-row commits of 21 MB at a time at 0.91x (1.60x one by one).
GATHER_BYTES = 16 << 20
# A large file is split where a partition's share ends unless a part would be smaller than
# this part of a share (``split_files``).
MIN_PART = 1 / 8


class FileTask(Protocol):
    """What planning needs of a source's task: one data file's part in one commit."""

    @property
    def path(self) -> str: ...
    @property
    def change_type(self) -> str | None: ...  # None: the file's own column (Delta CDC files)
    @property
    def version(self) -> int: ...
    @property
    def timestamp_ms(self) -> int: ...
    @property
    def size(self) -> int: ...


@dataclass(frozen=True)
class FileGroup(InputPartition):
    """The files one Spark task reads, one after the other. With ``resolve`` the files are
    whole commits whose rows the task resolves (the row-level passes), keeping only the
    rows of hash bucket ``bucket`` of ``buckets``, in ``spill`` parts on local disk when
    more than one; ``check_only`` reads only the row id and serves nothing, to check that
    no row id changes twice in the commit (see ``partitions``). Consecutive whole commits
    of at most ``GATHER_BYTES`` (``resolve_bytes``, if smaller) are resolved at once."""

    files: tuple[FileTask, ...]
    resolve: bool = False
    bucket: int = 0
    buckets: int = 1
    spill: int = 1
    check_only: bool = False
    resolve_bytes: int = RESOLVE_BYTES


def by_commit(files: Sequence[FileTask]) -> list[list[FileTask]]:
    """Tasks split where the version changes (a commit's tasks are consecutive)."""
    commits: list[list[FileTask]] = []
    for task in files:
        if commits and commits[-1][0].version == task.version:
            commits[-1].append(task)
        else:
            commits.append([task])
    return commits


def default_parallelism() -> int:
    """The driver's cores: a local server's cores (a cluster's executors have more; pass
    the ``parallelism`` option there)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def plan_partitions(
    tasks: Sequence[FileTask],
    parallelism: int,
    rules: RowLevelRules | None = None,
    resolve_bytes: int = RESOLVE_BYTES,
    key_share: float = 1.0,
    split: bool = False,
) -> list[FileGroup]:
    """The partitions that read ``tasks`` (in commit order) on ``parallelism`` cores, each
    commit's rows resolved by ``rules`` when given. ``key_share`` is the part of a row's
    bytes its row id columns take (what a check task reads), for sizing those tasks.
    ``split``: the tasks' reader reads spans of a file (``split_files``)."""
    if not tasks:
        return []
    share = _share(tasks, parallelism)
    if rules is None or not rules.any:
        return pack_files(tasks, share, split)
    plain: list[FileTask] = []
    groups: list[FileGroup] = []
    small: list[list[FileTask]] = []
    commits = by_commit(tasks)
    rewrites = sum(1 for c in commits if _cost(c) > share and not _one_kind(c))
    spread = max(1, parallelism // max(1, rewrites))  # the cores each large rewrite may use
    for commit in commits:
        one_kind = _one_kind(commit)
        if one_kind and not rules.update_detection:
            plain.extend(commit)  # no group can hold a delete+insert pair
            continue
        size = _cost(commit)
        if size <= share:
            small.append(commit)
        elif one_kind:  # read like a raw feed; check tasks look for a row id changed twice
            plain.extend(commit)
            groups += _buckets(commit, size * key_share, share, parallelism, resolve_bytes, True)
        else:
            groups += _buckets(commit, size, share, spread, resolve_bytes, False)
    packed = _even_cuts([_cost(c) for c in small], share)
    groups += [
        FileGroup(tuple(t for c in part for t in c), resolve=True, resolve_bytes=resolve_bytes)
        for part in _parts_of(small, packed)
    ]
    return pack_files(plain, share, split) + groups if plain else groups


def _one_kind(commit: Sequence[FileTask]) -> bool:
    """Only inserts or only deletes (CDC files carry both kinds in their rows)."""
    kinds = {task.change_type for task in commit}
    return None not in kinds and len(kinds) == 1


def _buckets(
    commit: list[FileTask],
    size: float,
    share: float,
    parallelism: int,
    resolve_bytes: int,
    check_only: bool,
) -> list[FileGroup]:
    count = bucket_count(size, share, parallelism, resolve_bytes)
    spill = max(1, math.ceil(size / count / resolve_bytes))
    files = tuple(commit)
    return [
        FileGroup(files, resolve=True, bucket=b, buckets=count, spill=spill, check_only=check_only)
        for b in range(count)
    ]


def bucket_count(size: float, share: float, parallelism: int, resolve_bytes: int) -> int:
    """Tasks for a commit of ``size`` bytes (with open costs) larger than its share.

    A bucket rereads the whole commit to resolve a part of it, which only pays for a part
    larger than one task resolves at once: one 1M-row rewrite of 21 MB (5 columns) took
    0.28 s as one task and 0.33 s as two buckets, one of 250 MB (50 columns) 2.1 s as one
    task and 1.7 s as two."""
    per_bucket = max(share, resolve_bytes)
    return max(1, min(math.ceil(size / per_bucket), MAX_SPREAD, parallelism))


def pack_files(tasks: Sequence[FileTask], share: float, split: bool = False) -> list[FileGroup]:
    """Consecutive files (commit order) in partitions of about ``share`` bytes; with
    ``split``, a file a cut between partitions falls in is split there (``split_files``)."""
    if split:
        tasks, cuts = split_files(tasks, share)
    else:
        cuts = _even_cuts([t.size + FILE_OPEN_COST for t in tasks], share)
    return [FileGroup(tuple(part)) for part in _parts_of(tasks, cuts)]


def split_files(tasks: Sequence[Any], share: float) -> tuple[list[Any], list[int]]:
    """``tasks`` cut at even shares of their running total, as ``_even_cuts`` cuts, but a
    file a cut falls in split there: each part reads the row groups whose middle falls in
    its ``span`` of the file, as Spark splits a Parquet file (``file_reader.
    split_row_groups``). So every partition holds the same bytes, whatever the files' sizes
    (a 100 MB and a 34 MB file on 2 cores: 67 MB each, not 100 and 34). Parts smaller than
    ``MIN_PART`` of a share are not cut off. For tasks whose rows need not meet in one task
    (a raw read's) of a reader that reads spans. Returns the tasks and their partitions."""
    costs = [t.size + FILE_OPEN_COST for t in tasks]
    total = sum(costs)
    count = max(1, math.ceil(total / share))
    width = total / count
    parts, cuts = [], []
    done = 0
    for task, cost in zip(tasks, costs, strict=True):
        inside = [k * width for k in range(1, count) if done < k * width < done + cost]
        edges = [done, *(e for e in inside if min(e - done, done + cost - e) >= width * MIN_PART)]
        edges.append(done + cost)
        for low, high in itertools.pairwise(edges):
            cuts.append(min(count - 1, int((low + high) / 2 / width)))
            if len(edges) == 2:
                parts.append(task)
                continue
            span = ((low - done) / cost, (high - done) / cost)
            size = round(task.size * (span[1] - span[0]))
            parts.append(dataclasses.replace(task, span=span, size=size))
        done += cost
    return parts, cuts


def _even_cuts(costs: Sequence[int], share: float) -> list[int]:
    """Each item's partition, consecutive items of about ``share`` in each. Cutting at even
    shares of the running total avoids the straggler partition next-fit leaves (20 small
    commits on 2 cores made 3 tasks, the last one commit alone)."""
    total = sum(costs)
    count = max(1, math.ceil(total / share))
    cuts = []
    done = 0
    for cost in costs:
        cuts.append(min(count - 1, int((done + cost / 2) * count / total)))
        done += cost
    return cuts


def _parts_of(items: Sequence[Any], cuts: Sequence[int]) -> list[list[Any]]:
    """``items`` split where their partition (``cuts``, ascending) changes."""
    runs = itertools.groupby(zip(items, cuts, strict=True), key=lambda pair: pair[1])
    return [[item for item, _ in run] for _, run in runs]


def _share(tasks: Sequence[FileTask], parallelism: int) -> float:
    total = _cost(tasks)
    return min(MAX_PARTITION_BYTES, max(MIN_PARTITION_BYTES, total / max(1, parallelism)))


def _cost(tasks: Sequence[FileTask]) -> int:
    return sum(t.size + FILE_OPEN_COST for t in tasks)
