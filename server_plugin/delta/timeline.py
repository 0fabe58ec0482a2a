"""Commits in version order, with the two things a change feed adds to them: a strictly
increasing commit timestamp and the schema each commit's rows were written with.

Timestamps are made monotonic the way Delta's history does it: a commit whose recorded
time is not above its predecessor's gets the predecessor's + 1 ms. A downstream zero-delay
watermark drops any commit that does not move time forward, so this is what keeps a
stream lossless when writers' clocks disagree. The chain starts at the first version read
and a stream carries it in its offsets, so a restart continues it exactly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import StructType
from spark_cdc.server_plugin.changefeed.commit_timestamps import next_timestamp
from spark_cdc.server_plugin.delta.log import Commit, DeltaLog, check_readable_protocol
from spark_cdc.server_plugin.delta.table_schema import physical_schema, table_schema
from spark_cdc.server_plugin.errors import ChangelogSourceError, error

log = logging.getLogger("delta_changelog")

# How long a listing of the log that ended before the commit a stream waits for stands in
# for a new one, as a multiple of what the listing took (at least a second): an idle stream
# asks on every poll (Spark polls every 10 ms), and a listing of 10,000 commits takes
# ~150 ms locally and many requests on an object store. So listing costs at most 5% of
# the time; a commit deleted behind the stream is noticed that much later.
LISTING_REUSE_FACTOR = 20


@dataclass(frozen=True)
class TimedCommit:
    commit: Commit
    timestamp_ms: int
    schema: StructType  # the schema the commit's data files were written with
    physical_schema: StructType  # the same, top-level columns by physical name


Schemas = tuple[StructType, StructType]  # logical, physical (see TimedCommit)


def _schemas(schema_string: str, configuration: dict[str, Any] | None) -> Schemas:
    return table_schema(schema_string), physical_schema(schema_string, configuration)


class Timeline:
    """Reads commits from a version on; tracks the schema in effect across them."""

    def __init__(self, delta_log: DeltaLog, fail_on_data_loss: bool) -> None:
        self.log = delta_log
        self.fail_on_data_loss = fail_on_data_loss
        self._schema_after: dict[int, Schemas] = {}
        self._end_seen: tuple[float, int] | None = None  # (reuse until, latest version then)

    def schema_at(self, version: int) -> Schemas:
        """The schema in effect after ``version`` (loads that snapshot once)."""
        if version not in self._schema_after:
            try:
                table = self.log.table(version)
            except ChangelogSourceError as refused:
                if refused.condition != "DELTA_CHANGELOG.DATA_LOSS_SNAPSHOT":
                    raise  # a damaged log is not a cleaned-up one
                table = self._table_with_schema_of(version)
            self._schema_after[version] = _schemas(
                table.schema().to_json(), table.metadata().configuration
            )
        return self._schema_after[version]

    def _table_with_schema_of(self, version: int) -> Any:
        """When the log before ``version`` is cleaned up, its snapshot cannot be loaded, but
        the latest one has its schema if no commit since changed it."""
        latest = self.log.table()
        for later in range(version + 1, latest.version() + 1):
            commit = self.log.commit(later)
            if commit is None or commit.metadata is not None:
                raise error("DELTA_CHANGELOG.DATA_LOSS_SCHEMA", version=version, path=self.log.uri)
        return latest

    def commits(
        self,
        first: int,
        previous_ms: int | None,
        last: int | None = None,
    ) -> Iterator[TimedCommit]:
        """Commits ``first..last`` (or until the log ends); a missing commit file in the
        middle is data loss (raised, or skipped with failOnDataLoss=false)."""
        if last is not None and first > last:
            return
        version = first
        schema = self.schema_at(first - 1) if first > 0 else None
        while last is None or version <= last:
            commit = self.log.commit(version)
            if commit is None:
                later = self._next_after(version)
                if later is None:  # the end of the log, not a gap
                    return
                self._data_loss(version, later)
                version, schema = later, self.schema_at(later)
                continue
            if commit.metadata is not None:
                check_readable_protocol(commit.protocol, commit.metadata)
                schema = _schemas(
                    commit.metadata["schemaString"], commit.metadata.get("configuration")
                )
            elif commit.protocol is not None and schema is not None:
                check_readable_protocol(commit.protocol, {})
            if schema is None:
                raise error("DELTA_CHANGELOG.DATA_LOSS_SCHEMA", version=version, path=self.log.uri)
            self._schema_after[version] = schema
            previous_ms = next_timestamp(commit.timestamp_ms, previous_ms)
            yield TimedCommit(commit, previous_ms, *schema)
            version += 1

    def _next_after(self, version: int) -> int | None:
        """The first commit after a missing one, None at the end of the log. Commits are
        written in order, so while a recent listing ended before ``version``, nothing after
        it has been written unless ``version`` was too; that listing is reused."""
        if self._end_seen is not None:
            until, latest = self._end_seen
            if latest < version and time.monotonic() < until:
                return None
        started = time.monotonic()
        versions = self.log.commit_versions()
        took = time.monotonic() - started
        if versions:
            self._end_seen = (started + max(1.0, LISTING_REUSE_FACTOR * took), versions[-1])
        return next((v for v in versions if v > version), None)

    def _data_loss(self, version: int, next_available: int) -> None:
        lost = error(
            "DELTA_CHANGELOG.DATA_LOSS",
            version=version,
            path=self.log.uri,
            nextAvailableVersion=next_available,
        )
        if self.fail_on_data_loss:
            raise lost
        log.warning("%s Skipping ahead because failOnDataLoss=false.", lost.message)

    # -- timestamps to versions --------------------------------------------------------

    def first_at_or_after(self, timestamp_ms: int, versions: list[int]) -> int | None:
        """The first commit recorded at or after the time (binary search over the log)."""
        lo, hi = 0, len(versions)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._recorded(versions[mid]) >= timestamp_ms:
                hi = mid
            else:
                lo = mid + 1
        return versions[lo] if lo < len(versions) else None

    def last_at_or_before(self, timestamp_ms: int, versions: list[int]) -> int | None:
        first_after = self.first_at_or_after(timestamp_ms + 1, versions)
        if first_after is None:
            return versions[-1] if versions else None
        earlier = [v for v in versions if v < first_after]
        return earlier[-1] if earlier else None

    def _recorded(self, version: int) -> int:
        commit = self.log.commit(version)
        if commit is None:
            raise error("DELTA_CHANGELOG.DATA_LOSS_DURING_READ", version=version, path=self.log.uri)
        return commit.timestamp_ms
