"""Counting the client's gRPC calls: how tests and benchmarks prove a plan build is local."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql import SparkSession


class CountingStub:
    """Records every gRPC method called on the client's stub."""

    def __init__(self, stub: Any) -> None:
        self._stub = stub
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._stub, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return method(*args, **kwargs)

        return call


@contextmanager
def counting_rpcs(spark: SparkSession) -> Iterator[CountingStub]:
    client = spark.client  # type: ignore[attr-defined]
    counting = CountingStub(client._stub)
    client._stub = counting
    try:
        yield counting
    finally:
        client._stub = counting._stub
