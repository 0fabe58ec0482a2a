"""What ``spark-cdc apply`` says of each micro-batch: what a CDC operator watches.

The source versions a batch covered come from the stream's progress (the change-feed
sources' offsets carry the next version and the last commit's time), what it wrote from
the state table's record of the batch (``spark_cdc.applied_batches``), and the lag in
numbers: the versions between the newest commit the source reports (the progress'
``latestOffset``; a source that reports none: the line says so) and the last one applied,
and the seconds since that last one was committed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class _Position:
    """A change-feed source's offset: the next version to read, and the time of the
    commit before it (ms; None: not recorded)."""

    version: int | None
    previous_ms: int | None

    @classmethod
    def of(cls, offset: str | None) -> _Position | None:
        parsed = _parsed(offset)
        if parsed is None:
            return None
        return cls(parsed.get("version"), parsed.get("previousCommitTimestamp"))


def _parsed(offset: str | None) -> dict[str, Any] | None:
    try:
        parsed = json.loads(offset) if offset else None
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def byte_size(count: int) -> str:
    """Bytes as a person reads them: ``512 bytes``, ``12.4 MB``."""
    if count < 1024:
        return f"{count:,} bytes"
    size = float(count)
    for unit in ("kB", "MB", "GB"):
        size /= 1024
        if size < 1024:
            return f"{size:,.1f} {unit}"
    return f"{size / 1024:,.1f} TB"


def _wal_lag(source: Any, now_ms: float) -> str | None:
    """A PostgreSQL source's lag: the log written since the last transaction applied, and
    what its slot keeps on the database's disk (its ``latestOffset``, Spark 4.2+)."""
    latest = _parsed(getattr(source, "latestOffset", None))
    end = _parsed(source.endOffset)
    if latest is None or "retainedWalBytes" not in latest:
        return None
    text = "lag"
    if end is not None and end.get("lsn") is not None:
        text += f" {byte_size(max(0, int(latest['lsn']) - int(end['lsn'])))} of WAL,"
    text += f" the slot keeps {byte_size(int(latest['retainedWalBytes']))} of WAL"
    if end is not None and end.get("previousUs") is not None:
        text += _ago(now_ms, int(end["previousUs"]) / 1000)
    return text


def _ago(now_ms: float, commit_ms: float) -> str:
    return f", newest applied commit {max(0.0, now_ms - commit_ms) / 1000:,.0f} s ago"


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def covered(progress: Any) -> str | None:
    """The source versions a micro-batch read: ``versions 3-5``, ``version 3``."""
    if not progress.sources:
        return None
    source = progress.sources[0]
    end = _Position.of(source.endOffset)
    if end is None or end.version is None:
        return None
    start = _Position.of(source.startOffset)
    last = end.version - 1
    first = start.version if start is not None and start.version is not None else None
    if first is None:
        return f"up to version {last}"
    if first > last:  # a micro-batch that read no commit
        return None
    if first == last:
        return f"version {last}"
    return f"versions {first}-{last}"


def lag(progress: Any, now_ms: float) -> str:
    """How far behind the source the target is after this micro-batch, in numbers: the
    source versions not applied yet (from the newest the source reports), and the seconds
    since the newest source commit applied was made (``now_ms``: the time now, in ms)."""
    source = progress.sources[0] if progress.sources else None
    wal = _wal_lag(source, now_ms) if source is not None else None
    if wal is not None:
        return wal
    end = _Position.of(source.endOffset) if source is not None else None
    latest = _Position.of(getattr(source, "latestOffset", None))
    if (
        end is not None
        and end.version is not None
        and latest is not None
        and latest.version is not None
    ):
        behind = max(0, latest.version - end.version)
        versions = _plural(behind, "version") + (" (caught up)" if behind == 0 else "")
    else:
        versions = "unknown versions (the source reports no newest version)"
    text = f"lag {versions}"
    if end is not None and end.previous_ms is not None:
        text += _ago(now_ms, end.previous_ms)
    return text


def batch_line(progress: Any, applied: Any | None, now_ms: float) -> str:
    """One micro-batch: ``batch 3 (versions 4-6): 1,200 changes, 1,180 keys and 1,180 rows
    written; lag 0 versions (caught up), newest applied commit 2 s ago``. ``applied``: the
    batch's ``AppliedChanges`` (None: it had no changes, or it is no longer among those the
    state table records)."""
    batch = int(progress.batchId)
    where = covered(progress)
    head = f"batch {batch}" + (f" ({where})" if where else "")
    changes = int(progress.numInputRows or 0)
    if applied is not None:
        done = (
            f"{_plural(applied.changes, 'change')}, {_plural(applied.keys, 'key')} and "
            f"{_plural(applied.rows, 'row')} written"
        )
    elif changes:
        done = f"{_plural(changes, 'change')} applied"
    else:
        done = "no changes"
    return f"{head}: {done}; {lag(progress, now_ms)}"
