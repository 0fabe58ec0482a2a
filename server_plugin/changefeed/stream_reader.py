"""The one stream reader of every change-feed source: Spark's streaming protocol over a
timeline of commits (versions 0, 1, 2, ... each with a commit time), whatever the format.

A format subclasses ``TimelineStreamReader`` and says only how it lists and reads its
commits: the newest one (``_head``), the commits from an offset with their file tasks
(``_commits``, raising a commit it cannot serve), the table as of a version as inserts
(``_snapshot_tasks``) and where the starting options put the start (``_first_version``).
What is shared:

- offsets (``offsets``): the first micro-batch pins the version a stream starts from, so a
  restarted batch reads the same snapshot;
- admission control (``admission``): whole commits per micro-batch within the limits, never
  part of one, so every micro-batch holds whole commits with increasing commit times;
- a commit that cannot be served (a schema change, data loss): the commits before it are
  served, then "no new data" is answered once, so that Spark runs its no-data micro-batch
  and a downstream watermark releases the last commit's rows; the next call raises it;
- ``trigger(availableNow=True)``: the newest version when it starts is the last one read;
- the newest commit reported as the progress' ``latestOffset`` (Spark 4.2+ asks for it): the lag.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType
from spark_cdc.server_plugin.changefeed.admission import AVAILABLE_NOW, AdmissionControl
from spark_cdc.server_plugin.changefeed.offsets import Offset, check_forward
from spark_cdc.server_plugin.changefeed.partitions import FileTask
from spark_cdc.server_plugin.changefeed.reader import ChangelogFileReader
from spark_cdc.server_plugin.changefeed.source_options import SourceOptions
from spark_cdc.server_plugin.errors import ChangelogSourceError


@dataclass(frozen=True)
class Served:
    """A commit as a stream serves it: its version, its commit time as the stream's
    timestamps chain it (None: not recorded), and the snapshot an offset names it by
    (Iceberg, whose branch can move away from it; None for Delta)."""

    version: int
    timestamp_ms: int | None
    snapshot_id: int | None = None


class TimelineStreamReader(
    ChangelogFileReader,
    AdmissionControl,
    DataSourceStreamReader,
    *AVAILABLE_NOW,  # type: ignore[misc]
):
    """Admits whole commits per micro-batch, within maxFilesPerTrigger/maxBytesPerTrigger
    (on servers that pass limits: 4.2+), but always at least one. A subclass sets
    ``table_id`` (what offsets are checked against) and ``started_at`` (the newest version
    when the stream started) in its ``__init__``."""

    table_id: str
    started_at: int

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        self.target: int | None = None  # trigger(availableNow=True): the last version to read
        self.position: Offset | None = None  # 4.0/4.1 call latestOffset() without a start
        # The tasks latestOffset admitted, for the partitions() call that plans that batch.
        self._planned: tuple[Offset, Offset, list[FileTask]] | None = None
        self._served = False  # whether the last latestOffset call admitted commits

    # What a format gives.

    def _first_version(self) -> int | None:
        """The first version the starting options name (``bounds.first_version``); None:
        the table's snapshot first (the default), or only what comes after (``'latest'``)."""
        raise NotImplementedError

    def _head(self, last: int | None) -> Served | None:
        """The newest commit now, or the newest up to ``last``; None: the table has none."""
        raise NotImplementedError

    def _newest_version(self) -> int | None:
        """The newest version now, what ``trigger(availableNow=True)`` reads up to. A format
        that can list versions without reading the newest commit overrides this: a damaged
        newest commit must fail the stream when it is reached, after the ones before it."""
        head = self._head(None)
        return head.version if head is not None else None

    def _commits(self, start: Offset, last: int | None) -> Iterator[tuple[Served, list[FileTask]]]:
        """The commits from ``start`` up to ``last`` (None: the newest), in order, with their
        file tasks; raises, when it reaches it, a commit this stream cannot serve."""
        raise NotImplementedError

    def _snapshot_tasks(self, pinned: Offset) -> list[FileTask]:
        """The table as of version ``pinned.version - 1``, as inserts at that version."""
        raise NotImplementedError

    # Spark's streaming protocol.

    def initialOffset(self) -> dict[str, Any]:
        with self.errors_named():
            return self._initial_offset().to_json()

    def _initial_offset(self) -> Offset:
        first = self._first_version()
        if first is not None:
            return Offset(self.table_id, first, False, None)
        return Offset(self.table_id, None, not self.options.starting_latest, None)

    def prepareForTriggerAvailableNow(self) -> None:
        with self.errors_named():
            newest = self._newest_version()
            self.target = newest if newest is not None else 0

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        with self.errors_named():
            if start is not None:
                begin = Offset.from_json(start, self.table_id, self.FAMILY)
            else:
                begin = self.position or self._initial_offset()
            end = self._advance(begin, limit)
            self.position = end
            return end.to_json()

    def _advance(self, start: Offset, limit: Any) -> Offset:
        if start.version is None:  # the first batch pins the version: snapshot or latest
            head = self._head(self.target)
            self._served = start.initial_snapshot and head is not None
            if head is None:  # an empty table: its first commit is the first change
                return Offset(self.table_id, 0, False, None)
            return self._after(head)
        budget = self._budget(limit)
        end, batch = start, list[FileTask]()
        try:
            for served, tasks in self._commits(start, self.target):
                if not budget.admit(tasks):
                    break
                end = self._after(served)
                batch += tasks
        except ChangelogSourceError:
            if not budget.commits and (not self._served or self.target is not None):
                raise
            # A commit that cannot be served: serve the ones before it, then, right after a
            # micro-batch with rows, answer "no new data" once (see the module docstring).
            # Not under availableNow: there "no new data" would end the query without the
            # error.
        self._served = budget.commits > 0
        self._planned = (start, end, batch)
        return end

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The newest commit as an offset (Spark 4.2+ asks; earlier servers show the
        ``latestOffset`` call's answer): the source's ``latestOffset`` in the query's
        progress, how far behind the stream is. A report never fails the stream: a commit
        that cannot be read fails it when it is reached."""
        try:
            head = self._head(None)
        except Exception:
            return None
        return self._after(head).to_json() if head is not None else None

    def _after(self, served: Served) -> Offset:
        """The offset right after ``served``: its successor is read next."""
        return Offset(
            self.table_id, served.version + 1, False, served.timestamp_ms, served.snapshot_id
        )

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        with self.errors_named():
            first = Offset.from_json(start, self.table_id, self.FAMILY)
            last = Offset.from_json(end, self.table_id, self.FAMILY)
            check_forward(first, last, self.FAMILY)
            if self.position is None or (self.position.version or 0) < (last.version or 0):
                self.position = last
            if first.version is None:
                if not first.initial_snapshot or last.version is None:
                    return []
                return list(self._partitions(self._snapshot_tasks(last)))
            if self._planned is not None and self._planned[:2] == (first, last):
                return list(self._partitions(self._planned[2]))  # already read and checked
            assert last.version is not None  # check_forward: an end at or after the start
            tasks: list[FileTask] = []
            for _, found in self._commits(first, last.version - 1):
                tasks += found
            return list(self._partitions(tasks))

    def commit(self, end: dict[str, Any]) -> None:
        pass
