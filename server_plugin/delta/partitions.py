"""How a read's data files become Spark partitions, as many as the cluster can run at once.

``parallelism`` is the number of tasks the cluster runs at once (its executors' cores; the
``parallelism`` option, else the driver's cores, which is right for a local server). A read
is cut into partitions of about ``total bytes / parallelism``, 4 to 128 MB of data files
each, every file counted with an open cost of 128 KB: enough partitions to keep every core
busy, few enough that per-task costs (a Python worker's garbage collection after each task,
20-40 ms) do not swamp tables of many small files.

When the source resolves the row-level passes, a commit is the unit: the rows of one row id
in one commit must meet in one task. Commits that need no work (only inserts or only
deletes, without update detection) are read like a raw feed. Small commits are packed
whole into partitions; a large one is split into buckets by a hash of the row id, every
bucket's task reading all of the commit's files and keeping its own rows. That costs each
extra bucket one more read of the commit, and buys two things:

- bounded memory: a task holds at most ``RESOLVE_BUCKET_BYTES`` of data files' worth of
  rows (about 64 MB; decoded in memory that is two to five times as much, see the README),
  however large the commit;
- parallelism: a commit larger than its share of the cores is spread over up to
  ``MAX_SPREAD`` buckets beyond what memory asks. Past that, a bucket's reading (the whole
  commit) outweighs the resolving it saves (a bucket's share of the commit), so more buckets
  would add reads and little speed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from spark_cdc.server_plugin.delta.file_tasks import FileGroup, FileTask, by_commit
from spark_cdc.server_plugin.row_level import RowLevelRules
from spark_cdc.server_plugin.vocabulary import DELETE, INSERT

MAX_PARTITION_BYTES = 128 << 20
MIN_PARTITION_BYTES = 4 << 20  # Spark's floor too: a small read is one task, in log order
FILE_OPEN_COST = 128 << 10
RESOLVE_BUCKET_BYTES = 64 << 20
MAX_SPREAD = 8


def default_parallelism() -> int:
    """The driver's cores: a local server's cores (a cluster's executors have more; pass
    the ``parallelism`` option there)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def plan_partitions(
    tasks: Sequence[FileTask], parallelism: int, rules: RowLevelRules | None = None
) -> list[FileGroup]:
    """The partitions that read ``tasks`` (in commit order) on ``parallelism`` cores, each
    commit's rows resolved by ``rules`` when given."""
    if not tasks:
        return []
    share = _share(tasks, parallelism)
    if rules is None or not rules.any:
        return pack_files(tasks, share)
    plain: list[FileTask] = []
    resolving: list[list[FileTask]] = []
    for commit in by_commit(tasks):
        if needs_resolution(commit, rules):
            resolving.append(commit)
        else:
            plain.extend(commit)
    groups = pack_files(plain, share) if plain else []
    small: list[FileTask] = []
    for commit in resolving:
        size = _cost(commit)
        if size <= share:
            if small and _cost(small) + size > share:
                groups.append(FileGroup(tuple(small), resolve=True))
                small = []
            small += commit
            continue
        buckets = bucket_count(size, share, parallelism)
        files = tuple(commit)
        groups += [
            FileGroup(files, bucket=b, buckets=buckets, resolve=True) for b in range(buckets)
        ]
    if small:
        groups.append(FileGroup(tuple(small), resolve=True))
    return groups


def bucket_count(size: int, share: float, parallelism: int) -> int:
    """Buckets for a commit of ``size`` bytes (with open costs) larger than its share."""
    for_memory = math.ceil(size / RESOLVE_BUCKET_BYTES)
    for_cores = min(math.ceil(size / share), MAX_SPREAD, parallelism)
    return max(1, for_memory, for_cores)


def needs_resolution(commit: Sequence[FileTask], rules: RowLevelRules) -> bool:
    """Whether a commit's rows can be changed by the passes: a carry-over or an update needs
    a delete and an insert; a change data file may hold anything; and update detection
    also checks commits of one kind for a row id changed twice."""
    kinds = {task.change_type for task in commit}
    if None in kinds or rules.update_detection:
        return True
    return {INSERT, DELETE} <= kinds


def pack_files(tasks: Sequence[FileTask], share: float) -> list[FileGroup]:
    """Consecutive files (commit order) in partitions of about ``share`` bytes. Cutting at
    even shares of the running total avoids the straggler partition next-fit leaves."""
    costs = [t.size + FILE_OPEN_COST for t in tasks]
    total = sum(costs)
    count = max(1, math.ceil(total / share))
    groups: list[list[FileTask]] = [[] for _ in range(count)]
    done = 0
    for task, cost in zip(tasks, costs, strict=True):
        groups[min(count - 1, int((done + cost / 2) * count / total))].append(task)
        done += cost
    return [FileGroup(tuple(group)) for group in groups if group]


def _share(tasks: Sequence[FileTask], parallelism: int) -> float:
    total = _cost(tasks)
    return min(MAX_PARTITION_BYTES, max(MIN_PARTITION_BYTES, total / max(1, parallelism)))


def _cost(tasks: Sequence[FileTask]) -> int:
    return sum(t.size + FILE_OPEN_COST for t in tasks)
