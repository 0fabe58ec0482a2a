"""``apply_changes``' cost as an Iceberg target grows: the Delta growth case's clustered
micro-batches (``apply.clustered_changes``: a run of consecutive ids and new ones, type 1)
into a target of 10M rows and one of 40M (``apply.GROWTH_ROWS``), each built by
``apply_changes`` once (``apply_iceberg.ours_base``), by default (copy-on-write) and merging
on read: seconds per micro-batch after the first, larger ÷ smaller, medians of interleaved
repetitions."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

from spark_cdc import apply_changes

from tests.bench import apply
from tests.bench.apply_iceberg import (
    TABLE,
    base_rows,
    merging_on_read,
    ours_base,
    registered,
)
from tests.bench.common import Bench, Figure, interleaved, medians, paired_spread

BENCHMARK = "apply_iceberg_growth"


def run(bench: Bench) -> list[Figure]:
    """One figure a mode (the issue's target: at most 1.3)."""
    small_rows, large_rows = apply.QUICK_GROWTH_ROWS if bench.quick else apply.GROWTH_ROWS
    count = apply.QUICK_GROWTH_CHANGES if bench.quick else apply.GROWTH_CHANGES
    runs = bench.work / "apply_iceberg_growth_runs"
    firsts: list[float] = []

    def side(rows: int, merging: bool) -> Callable[[], float]:
        def timed() -> float:
            run = apply.unused_folder(runs / f"growth-{rows}")
            base = ours_base(bench, base_rows(bench, rows), rows, 1)
            catalog = registered(run, base)
            if merging:
                merging_on_read(catalog)
            source = apply.clustered_changes(bench, rows, count)

            def start() -> Any:
                return apply_changes(
                    apply.file_stream(bench, source),
                    TABLE,
                    checkpoint_location=str(run / "checkpoint"),
                    trigger={"availableNow": True},
                    format="iceberg",
                    catalog=catalog,
                    **apply.APPLIED,
                )

            return count / apply.micro_batch_rates(count, start, firsts)

        return timed

    figures = []
    for merging in (False, True):
        names = {r: f"{r:,} rows" for r in (small_rows, large_rows)}
        sides = {names[r]: side(r, merging) for r in (small_rows, large_rows)}
        samples = interleaved(sides, bench.reps)
        shutil.rmtree(runs, ignore_errors=True)
        seconds = medians(samples)
        ratio = seconds[names[large_rows]] / seconds[names[small_rows]]
        mode = ", merge-on-read" if merging else ""
        figures.append(
            Figure(
                BENCHMARK,
                f"Iceberg growth{mode}: {count:,} clustered changes a micro-batch, "
                f"{large_rows:,} ÷ {small_rows:,} rows",
                "seconds per micro-batch after the first, larger target ÷ smaller",
                round(ratio, 3),
                target="≤ 1.3",
                met=ratio <= 1.3,
                medians={k: round(v, 3) for k, v in seconds.items()},
                samples={k: [round(x, 3) for x in v] for k, v in samples.items()},
                spread=paired_spread(samples[names[large_rows]], samples[names[small_rows]]),
                notes=", ".join(f"{k}: {v:.2f} s a micro-batch" for k, v in seconds.items()),
            )
        )
    return figures
