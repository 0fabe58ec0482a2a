"""A Delta table written from a background thread while the tests break the stream reading it.

``TableWriter`` commits with delta-rs, one commit per step, in a seeded random order: appends,
copy-on-write updates (the rewritten files' other rows become carry-over pairs), updates that
change nothing (carry-overs only), deletes, merges (update + insert in one commit),
compaction (``dataChange=false``: no rows in the feed) and checkpoints (no commit at all).
Row ids stay unique, as ``computeUpdates`` requires. It is the only writer of its table, so
it knows which ids are live without reading the table back.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from types import TracebackType

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

REGIONS = ("north", "south", "east")  # the partition column: commits touch several files
STATUSES = ("new", "paid", "shipped", "refunded")
CDF = {"delta.enableChangeDataFeed": "true"}

# Relative weights of the steps; checkpoints and compactions are rare, as in real tables.
STEPS = {
    "append": 3.0,
    "update": 3.0,
    "delete": 2.0,
    "merge": 2.0,
    "noop_update": 0.4,
    "compact": 0.3,
    "checkpoint": 0.2,
}


def orders(ids: list[int], status: str = "new", note: str | None = None) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "region": pa.array([REGIONS[i % len(REGIONS)] for i in ids]),
            "status": pa.array([status] * len(ids)),
            "amount": pa.array([1.25 * i for i in ids], pa.float64()),
            "note": pa.array([note] * len(ids), pa.string()),
        }
    )


@dataclass
class WriterStats:
    """What the writer did: commits made (table versions) and steps by kind."""

    commits: int = 0
    steps: Counter[str] = field(default_factory=Counter)


class TableWriter:
    """Commits to the Delta table at ``path`` from a thread until ``stop()``.

    ``create()`` writes version 0 synchronously (so a stream can start on the table at
    once); ``start()`` begins the thread, which pauses a random ``pause`` range (seconds)
    between steps. An error in the thread is re-raised by ``stop()``.
    """

    def __init__(
        self,
        path: str,
        seed: int,
        *,
        pause: tuple[float, float] = (0.05, 0.4),
        cdf: bool = False,
        initial_rows: int = 12,
    ) -> None:
        self.path = path
        self.pause = pause
        self.cdf = cdf
        self.stats = WriterStats()
        self._rng = random.Random(seed)
        self._live: set[int] = set(range(initial_rows))
        self._next_id = initial_rows
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"writer-{path}", daemon=True)
        self._committed = threading.Condition()

    def create(self) -> TableWriter:
        write_deltalake(
            self.path,
            orders(sorted(self._live)),
            partition_by=["region"],
            configuration=CDF if self.cdf else None,
        )
        self._count("create", committed=True)
        return self

    def start(self) -> TableWriter:
        if not self.stats.commits:
            self.create()
        self._thread.start()
        return self

    def write(self, steps: int) -> WriterStats:
        """Make ``steps`` steps in the calling thread (a table written before a test reads)."""
        if not self.stats.commits:
            self.create()
        for _ in range(steps):
            self._step()
        return self.stats

    def stop(self) -> WriterStats:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=120)
            assert not self._thread.is_alive(), "the writer did not stop within 120 s"
        if self._error is not None:
            raise self._error
        return self.stats

    def wait_for_commits(self, commits: int, timeout: float = 300) -> None:
        """Block until the writer has made ``commits`` commits in all (a condition, not a
        sleep: the wait ends as soon as they exist)."""
        deadline = time.monotonic() + timeout
        with self._committed:
            while self.stats.commits < commits:
                if self._error is not None or not self._thread.is_alive():
                    raise AssertionError(f"the writer stopped after {self.stats.commits} commits")
                left = deadline - time.monotonic()
                assert left > 0, f"the writer made {self.stats.commits} of {commits} commits"
                self._committed.wait(min(left, 1.0))

    def __enter__(self) -> TableWriter:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        if kind is None:
            self.stop()
        else:  # the test's failure matters more than the writer's
            self._thread.join(timeout=120)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._rng.uniform(*self.pause)):
                self._step()
        except BaseException as error:  # re-raised by stop()
            self._error = error
        finally:
            with self._committed:
                self._committed.notify_all()

    def _count(self, kind: str, committed: bool) -> None:
        with self._committed:
            self.stats.steps[kind] += 1
            self.stats.commits += int(committed)
            self._committed.notify_all()

    def _pick(self, most: int) -> list[int]:
        return self._rng.sample(
            sorted(self._live), self._rng.randint(1, min(most, len(self._live)))
        )

    def _new_ids(self, most: int) -> list[int]:
        count = self._rng.randint(1, most)
        ids = list(range(self._next_id, self._next_id + count))
        self._next_id += count
        return ids

    def _step(self) -> None:
        kind = self._rng.choices(list(STEPS), weights=list(STEPS.values()))[0]
        if kind in ("delete", "update", "noop_update", "merge") and len(self._live) < 6:
            kind = "append"
        table = DeltaTable(self.path)
        before = table.version()
        if kind == "append":
            ids = self._new_ids(4)
            write_deltalake(self.path, orders(ids), mode="append", partition_by=["region"])
            self._live.update(ids)
        elif kind == "update":
            ids = ", ".join(map(str, self._pick(3)))
            note = self._rng.choice(["NULL", "'checked'", "'late'"])
            status = self._rng.choice(STATUSES)
            table.update(
                {"status": f"'{status}'", "amount": "amount + 0.5", "note": note},
                predicate=f"id IN ({ids})",
            )
        elif kind == "noop_update":
            table.update({"status": "status"}, predicate=f"id = {self._pick(1)[0]}")
        elif kind == "delete":
            ids = self._pick(2)
            table.delete(f"id IN ({', '.join(map(str, ids))})")
            self._live.difference_update(ids)
        elif kind == "merge":
            changed = orders(self._pick(2), status=self._rng.choice(STATUSES), note="merged")
            ids = self._new_ids(2)
            source = pa.concat_tables([changed, orders(ids, note="merged")])
            (
                table.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute()
            )
            self._live.update(ids)
        elif kind == "compact":
            table.optimize.compact()
        else:
            table.create_checkpoint()
        self._count(kind, committed=DeltaTable(self.path).version() > before)
