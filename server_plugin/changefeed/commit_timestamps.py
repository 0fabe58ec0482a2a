"""Commit times, shared by the sources: strictly increasing ``_commit_timestamp``s, and
Spark's timestamp strings (the range options) as epoch milliseconds.

A commit's recorded time comes from its writer's clock, which may repeat a millisecond or
go back; Spark's changelog contract (and every micro-batch of ours) needs each commit later
than the one before. Delta's own CDF does the same (``DeltaHistoryManager`` monotonizes
commit timestamps): a time not later than the previous one becomes one millisecond after it.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from spark_cdc.server_plugin.cdc_options import invalid_timestamp


def next_timestamp(recorded_ms: int, previous_ms: int | None) -> int:
    return recorded_ms if previous_ms is None or recorded_ms > previous_ms else previous_ms + 1


def parse_timestamp_ms(option: str, text: str) -> int:
    """A Spark timestamp string as epoch milliseconds; a string without a zone is UTC."""
    value = text.strip()
    zone = None
    head, _, tail = value.rpartition(" ")
    if head and ("/" in tail or tail in ("UTC", "GMT")):
        value, zone = head, tail
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(value)
        if zone is not None:
            moment = moment.replace(tzinfo=ZoneInfo(zone))
    except (ValueError, KeyError) as problem:
        raise invalid_timestamp(option, text) from problem
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (moment - epoch) // timedelta(milliseconds=1)
