"""What every benchmark shares: the session it runs in, interleaved timing, one result type.

Each figure is a ratio of two runs made in the same process, repeated with the two sides
interleaved (so drift of a loaded machine hits both), and reported as the median.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession


@dataclass
class Bench:
    """A benchmark's world: one session on the local server, a work folder, the run's size."""

    spark: SparkSession
    work: Path
    reps: int
    quick: bool  # small sizes: proves the benchmark runs, measures nothing worth quoting
    server_pid: int | None = None  # the local server's process group (its Python workers)
    server_conf: dict[str, str] = field(default_factory=dict)  # what the server started with

    def folder(self, name: str) -> Path:
        path = self.work / name
        path.mkdir(parents=True, exist_ok=True)
        return path


@dataclass
class Figure:
    """One line of the results table (and one bar of the chart)."""

    benchmark: str  # "streaming", "batch", "delta_source", "latency", "scaling"
    case: str  # what varies, in words: "100k rows/commit, 5 columns"
    ratio_label: str  # how the headline number is formed: "(b)/(a)"
    ratio: float | None  # the headline number (a ratio, or seconds/rows where said)
    target: str | None = None  # "≥ 0.4", or None when the issue sets none
    met: bool | None = None
    medians: dict[str, float] = field(default_factory=dict)  # per side, e.g. rows/s
    samples: dict[str, list[float]] = field(default_factory=dict)
    notes: str = ""
    spread: tuple[float, float] | None = None  # lowest and highest ratio of one repetition

    def as_json(self) -> dict[str, Any]:
        return self.__dict__.copy()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Figure:
        fields = dict(data)
        if fields.get("spread") is not None:
            fields["spread"] = tuple(fields["spread"])
        return cls(**fields)


def paired_spread(over: list[float], under: list[float]) -> tuple[float, float]:
    """The run-to-run spread of ``median(over) / median(under)``: the lowest and highest
    ratio of one repetition's two sides (interleaved, so each pair ran back to back)."""
    ratios = [a / b for a, b in zip(over, under, strict=True)]
    return round(min(ratios), 3), round(max(ratios), 3)


def seconds(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def noop_seconds(make: Callable[[], Any]) -> Callable[[], float]:
    """A run that builds a fresh DataFrame with ``make`` and times writing it to the
    ``noop`` sink (every row read, nothing written)."""
    return lambda: seconds(lambda: make().write.format("noop").mode("overwrite").save())


def timed_reads(
    runs: Mapping[str, Callable[[], Any]], reps: int
) -> tuple[dict[str, int], dict[str, list[float]]]:
    """Each reader's row count (which must agree; counting also warms them up) and its
    seconds into ``noop``, interleaved."""
    counts = {name: make().count() for name, make in runs.items()}
    if len(set(counts.values())) != 1:
        raise AssertionError(f"the readers disagree on the row count: {counts}")
    return counts, interleaved({name: noop_seconds(make) for name, make in runs.items()}, reps)


def stream_seconds(
    start: Callable[[], Any],
    batches: list[list[float]] | None = None,
    first_ends: list[float] | None = None,
) -> float:
    """Seconds from ``start()`` (a streaming query, ``availableNow``) to its end; its
    failure is raised. ``batches``, when given, gets the run's micro-batch seconds (each
    trigger's whole execution, from the query's progress); ``first_ends`` the seconds from
    ``start()`` to the end of the first micro-batch (the server's clock is this machine's)."""
    started = time.time()

    def run() -> None:
        query = start()
        query.awaitTermination()
        if query.exception() is not None:
            raise query.exception()
        progress = query.recentProgress
        if batches is not None:
            batches.append([p["durationMs"]["triggerExecution"] / 1000 for p in progress])
        if first_ends is not None and progress:
            began = datetime.fromisoformat(progress[0]["timestamp"].replace("Z", "+00:00"))
            took = progress[0]["durationMs"]["triggerExecution"] / 1000
            first_ends.append(began.timestamp() + took - started)

    return seconds(run)


def interleaved(
    runs: Mapping[str, Callable[[], float]], reps: int, at_least_s: float = 0.0, most: int = 30
) -> dict[str, list[float]]:
    """Run each side ``reps`` times, alternating sides; each run returns its own measure.
    With ``at_least_s`` (runs that return seconds), go on, up to ``most`` repetitions,
    until every side has run that long in all: the median of three sub-second runs moves
    by several percent between runs of the same code on this shared machine
    (``delta_batch`` at 100k rows per commit: 0.25 s a read, three reps gave 0.98 and
    1.04, fifteen gave 1.10)."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    done = 0
    while done < reps or (
        done < most and min(sum(values) for values in samples.values()) < at_least_s
    ):
        for name, run in runs.items():
            samples[name].append(run())
        done += 1
    return samples


def medians(samples: Mapping[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in samples.items()}


def at_least(value: float | None, target: float) -> bool | None:
    return None if value is None else value >= target
