"""A branch's snapshots as a changelog's commits: oldest first, each with its
``_commit_version`` and a ``_commit_timestamp`` that strictly increases.

``_commit_version`` is the snapshot's sequence number, which Iceberg v2+ gives every
snapshot, increasing along a branch and never reused. Iceberg v1 has none (every snapshot's
is 0): a v1 snapshot's version is its position in the branch's ancestry (1 for the first);
a table upgraded from v1 numbers its v2 snapshots after its v1 ones. Snapshot timestamps
come from writers' clocks and may repeat or go back: each is made one millisecond later than
the one before when it is not later (as the Delta source does with commit timestamps).

The ancestry is followed from the branch's head through each snapshot's parent; it ends at
the first snapshot or at one whose parent was expired (``expired_before``: the changes
before it cannot be read any more).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_cdc.server_plugin.changefeed.commit_timestamps import next_timestamp
from spark_cdc.server_plugin.errors import error


@dataclass(frozen=True)
class TimedSnapshot:
    snapshot: Any  # pyiceberg's Snapshot
    version: int
    timestamp_ms: int

    @property
    def operation(self) -> str | None:
        summary = self.snapshot.summary
        return None if summary is None else summary.operation.value


@dataclass(frozen=True)
class Timeline:
    snapshots: tuple[TimedSnapshot, ...]
    expired_before: bool  # the oldest snapshot's parent is gone


def timeline(metadata: Any, branch: str = "main", table: str = "") -> Timeline:
    """``branch``'s snapshots of the table ``metadata`` describes, oldest first (none: an
    empty table)."""
    ref = metadata.refs.get(branch)
    if ref is None:
        if branch == "main" and metadata.current_snapshot_id is None:
            return Timeline((), False)
        raise error("ICEBERG_CHANGELOG.UNKNOWN_BRANCH", path=table, branch=branch)
    chain = []
    snapshot = metadata.snapshot_by_id(ref.snapshot_id)
    while snapshot is not None:
        chain.append(snapshot)
        parent = snapshot.parent_snapshot_id
        snapshot = None if parent is None else metadata.snapshot_by_id(parent)
    chain.reverse()
    expired = bool(chain) and chain[0].parent_snapshot_id is not None
    timed, previous_ms, v1_count = [], None, 0
    for position, snapshot in enumerate(chain, start=1):
        if snapshot.sequence_number == 0:  # written as v1
            version = position
            v1_count = position
        else:
            version = v1_count + snapshot.sequence_number
        previous_ms = next_timestamp(snapshot.timestamp_ms, previous_ms)
        timed.append(TimedSnapshot(snapshot, version, previous_ms))
    return Timeline(tuple(timed), expired)
