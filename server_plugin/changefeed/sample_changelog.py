"""``cdc_sample_changelog``: a Python data source serving a fixed change feed, whole commits
per micro-batch (``commitsPerBatch``, default 1). The demo and the tests feed it.

Commits travel in the options as JSON, so the class is self-contained: ``register`` pickles
it to the server by value and it needs nothing there but pyspark and pyarrow.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType
from spark_cdc.server_plugin.arrow_types import arrow_schema
from spark_cdc.server_plugin.registration import register_by_value

try:  # Spark 4.2+: lets trigger(availableNow=True) run its final no-data batch.
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    _AVAILABLE_NOW: tuple[type, ...] = (SupportsTriggerAvailableNow,)
except ImportError:  # 4.0/4.1 have no such hook for Python sources.
    _AVAILABLE_NOW = ()

SOURCE_NAME = "cdc_sample_changelog"


def commits_option(commits: Sequence[Sequence[dict[str, Any]]]) -> str:
    """JSON for the ``commits`` option: a list of commits, each a list of row dicts.

    Timestamps are given as epoch microseconds; maps as dicts (string keys).
    """
    return json.dumps([list(rows) for rows in commits])


@dataclass
class CommitRange(InputPartition):
    first: int
    end: int


def _arrow_batches(
    schema: StructType, commits: list[list[dict[str, Any]]], part: InputPartition
) -> Iterator[Any]:
    import pyarrow as pa

    target = arrow_schema(schema)
    if not isinstance(part, CommitRange):  # Spark's single default partition of an empty feed
        return
    for rows in commits[part.first : part.end]:
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=target)


class _BatchReader(DataSourceReader):
    def __init__(self, schema: StructType, commits: list[list[dict[str, Any]]]) -> None:
        self.schema, self.commits = schema, commits

    def partitions(self) -> Sequence[InputPartition]:
        return [CommitRange(i, i + 1) for i in range(len(self.commits))]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _arrow_batches(self.schema, self.commits, partition)


class _StreamReader(DataSourceStreamReader, *_AVAILABLE_NOW):  # type: ignore[misc]
    """Serves ``commitsPerBatch`` commits per micro-batch, never splitting one."""

    def __init__(self, schema: StructType, commits: list[list[dict[str, Any]]], per_batch: int):
        self.schema, self.commits, self.per_batch = schema, commits, per_batch
        self.position = 0  # 4.0/4.1 call latestOffset() without the start offset

    def initialOffset(self) -> dict[str, int]:
        return {"commit": 0}

    def latestOffset(
        self, start: dict[str, int] | None = None, limit: Any = None
    ) -> dict[str, int]:
        base = start["commit"] if start is not None else self.position
        self.position = min(base + self.per_batch, len(self.commits))
        return {"commit": self.position}

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        self.position = max(self.position, end["commit"])
        return [CommitRange(i, i + 1) for i in range(start["commit"], end["commit"])]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _arrow_batches(self.schema, self.commits, partition)

    def commit(self, end: dict[str, int]) -> None:
        # A restarted 4.0/4.1 stream tells the reader where it is only through the offsets
        # it passes (its latestOffset() has no start): never serve before them again.
        self.position = max(self.position, end["commit"])


class SampleChangelogSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return self.options["schema"]

    def _commits(self) -> list[list[dict[str, Any]]]:
        return json.loads(self.options["commits"])

    def reader(self, schema: StructType) -> DataSourceReader:
        return _BatchReader(schema, self._commits())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        per_batch = int(self.options.get("commitsPerBatch", "1"))
        return _StreamReader(schema, self._commits(), per_batch)


def register(spark: Any) -> None:
    """Register the source with a session; its code travels by value, not by module name."""
    register_by_value(spark, SampleChangelogSource)
