"""A very large copy-on-write commit resolved in the source: how many tasks it becomes, how
busy the cores are, and the peak memory of one Python worker.

One Delta table whose version 1 rewrites all of its rows (an UPDATE of 10% of them): 10M
changelog rows in one commit (5M deletes, 5M inserts; 1M with ``--quick``), 5 columns. It
is read in batch through ``ChangelogReader`` (rowId + computeUpdates, the source resolving
the passes) into the ``noop`` sink. Meanwhile the server's Python workers (the Python
processes of the server's session) are sampled every 50 ms from ``/proc``: their resident
memory (the largest any one of them reached) and their CPU time, which over the wall time
says how many cores the read kept busy. The partition plan is the one the source makes,
computed here with the same code.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from spark_cdc import ChangelogReader
from spark_cdc.server_plugin.changefeed.partitions import FILE_OPEN_COST
from spark_cdc.server_plugin.delta.source import DeltaChangelogSource

from tests.bench.common import Bench, Figure
from tests.bench.streaming import delta_table

BENCHMARK = "worker_memory"
ROWS = 10_000_000
QUICK_ROWS = 1_000_000
COLUMNS = 5
OPTIONS = {"rowId": "id", "computeUpdates": "true", "startingVersion": "1"}
TICK = os.sysconf("SC_CLK_TCK")
MEMORY_TARGET_MB = 1024  # issue 76's: a worker's peak


def _workers(session: int, names: tuple[str, ...] = ("python",)) -> dict[int, tuple[int, int]]:
    """Processes of session ``session`` whose name holds one of ``names`` (by default the
    server's Python processes: spark-submit starts the session, the JVM and PySpark's worker
    daemon, which makes its own process group, stay in it): pid -> (resident KB, CPU ticks)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            command = stat[: stat.rindex(")")]
            if int(fields[3]) != session or not any(name in command for name in names):
                continue
            status = (entry / "status").read_text()
        except (OSError, ValueError):
            continue
        rss = next(
            (int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")), 0
        )
        found[int(entry.name)] = (rss, int(fields[11]) + int(fields[12]))
    return found


class Sampler:
    """Peak resident memory of any one worker (any one process of ``names``) and the
    workers' CPU time during a run."""

    def __init__(self, session: int, names: tuple[str, ...] = ("python",)) -> None:
        self.session = session
        self.names = names
        self.peak_kb = 0
        self.start = _workers(session, names)
        self.last = dict(self.start)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = _workers(self.session, self.names)
            self.last.update(now)
            self.peak_kb = max([self.peak_kb, *(rss for rss, _ in now.values())])
            time.sleep(0.05)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def cpu_seconds(self) -> dict[int, float]:
        """CPU seconds each worker spent during the run (those that spent any)."""
        spent = {
            pid: (cpu - self.start.get(pid, (0, 0))[1]) / TICK
            for pid, (_, cpu) in self.last.items()
        }
        return {pid: seconds for pid, seconds in spent.items() if seconds > 0}


def planned(path: str, parallelism: int | None) -> list[object]:
    options = {"path": path, **OPTIONS}
    if parallelism:
        options["parallelism"] = str(parallelism)
    source = DeltaChangelogSource(options)
    return list(source.reader(source.schema()).partitions())


def run(bench: Bench) -> list[Figure]:
    if bench.server_pid is None:
        return []
    rows = QUICK_ROWS if bench.quick else ROWS
    path = delta_table(bench, rows, 1, COLUMNS)
    figures = []
    for parallelism in (None, 1):
        groups = planned(path, parallelism)
        part_bytes = max(
            sum(f.size + FILE_OPEN_COST for f in g.files) / g.buckets / g.spill  # type: ignore[attr-defined]
            for g in groups
        )
        reader = ChangelogReader(bench.spark).options(**OPTIONS)
        if parallelism:
            reader.option("parallelism", parallelism)
        df = reader.changes(path)
        df.write.format("noop").mode("overwrite").save()  # warm-up: workers, the log
        with Sampler(bench.server_pid) as sampler:
            started = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            wall = time.perf_counter() - started
        spent = sampler.cpu_seconds()
        total = sum(spent.values())
        # Workers that did a real share of the work. On a machine shared with other jobs the
        # ratio of CPU to wall time says more about the neighbours than about the plan.
        fair = total / max(1, len(spent))
        busy = sum(1 for seconds in spent.values() if seconds >= 0.2 * fair)
        setting = f"parallelism={parallelism}" if parallelism else "default parallelism"
        case = f"{rows:,}-row commit, {COLUMNS} columns, {setting}"
        buckets = max(g.buckets for g in groups)  # type: ignore[attr-defined]
        spill = max(g.spill for g in groups)  # type: ignore[attr-defined]
        notes = (
            f"{len(groups)} tasks ({buckets} buckets, each in {spill} part(s) of at most "
            f"{part_bytes / 2**20:.0f} MB of data files); {wall:.1f} s, {rows / wall:,.0f} "
            f"changelog rows/s; workers' CPU s {sorted(round(v, 1) for v in spent.values())} "
            f"({total / wall:.2f} cores busy)"
        )
        figures.append(
            Figure(
                BENCHMARK,
                case,
                "peak RSS of one Python worker (MB)",
                round(sampler.peak_kb / 1024),
                target=f"≤ {MEMORY_TARGET_MB}",
                met=sampler.peak_kb / 1024 <= MEMORY_TARGET_MB,
                notes=notes,
            )
        )
        figures.append(
            Figure(BENCHMARK, case, "Python workers that did the work", busy, notes=notes)
        )
    return figures
