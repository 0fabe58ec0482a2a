"""Strictly increasing ``_commit_timestamp``s, shared by the sources.

A commit's recorded time comes from its writer's clock, which may repeat a millisecond or
go back; Spark's changelog contract (and every micro-batch of ours) needs each commit later
than the one before. Delta's own CDF does the same (``DeltaHistoryManager`` monotonizes
commit timestamps): a time not later than the previous one becomes one millisecond after it.
"""

from __future__ import annotations


def next_timestamp(recorded_ms: int, previous_ms: int | None) -> int:
    return recorded_ms if previous_ms is None or recorded_ms > previous_ms else previous_ms + 1
