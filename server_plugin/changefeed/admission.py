"""Admission control for the sources' streams: how many whole commits a micro-batch takes,
within ``maxFilesPerTrigger`` / ``maxBytesPerTrigger`` (on servers that pass limits: 4.2+),
but always at least one commit, so a commit larger than the limit is still read, alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spark_cdc.server_plugin.changefeed.partitions import FileTask
from spark_cdc.server_plugin.changefeed.source_options import SourceOptions

try:  # Spark 4.2+: admission control and trigger(availableNow=True) for Python sources.
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxBytes,
        ReadMaxFiles,
        SupportsTriggerAvailableNow,
    )

    AVAILABLE_NOW: tuple[type, ...] = (SupportsTriggerAvailableNow,)
except ImportError:
    ReadAllAvailable = ReadMaxBytes = ReadMaxFiles = None  # type: ignore[assignment,misc]
    AVAILABLE_NOW = ()


class Budget:
    """What a micro-batch has admitted so far, against its limits."""

    def __init__(self, max_files: float, max_bytes: float) -> None:
        self.max_files, self.max_bytes = max_files, max_bytes
        self.files = self.size = self.commits = 0

    def admit(self, tasks: Sequence[FileTask]) -> bool:
        """Take a commit's tasks when they fit (the first commit always does)."""
        files, size = self.files + len(tasks), self.size + sum(t.size for t in tasks)
        if self.commits and (files > self.max_files or size > self.max_bytes):
            return False
        self.files, self.size, self.commits = files, size, self.commits + 1
        return True


class AdmissionControl:
    """The stream reader's side of Spark's admission control: its default limit and the
    limits a call of ``latestOffset`` reads within."""

    options: SourceOptions

    def _budget(self, limit: Any) -> Budget:
        """Our options decide the limits; Spark only overrides them with "everything"."""
        if ReadAllAvailable is None or limit is None or isinstance(limit, ReadAllAvailable):
            return Budget(float("inf"), float("inf"))
        files, size = self.options.file_limit, self.options.max_bytes
        return Budget(files or float("inf"), size or float("inf"))

    def getDefaultReadLimit(self) -> Any:
        if self.options.file_limit is None:
            assert self.options.max_bytes is not None  # else file_limit is the default
            return ReadMaxBytes(self.options.max_bytes)
        return ReadMaxFiles(self.options.file_limit)
