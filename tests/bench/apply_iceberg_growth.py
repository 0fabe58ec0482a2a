"""``apply_changes``' cost as an Iceberg target grows: the Delta growth case's clustered
micro-batches (``apply.clustered_changes``: a run of consecutive ids and new ones, type 1)
into a target of 10M rows and one of 40M (``apply.GROWTH_ROWS``), each built by
``apply_changes`` once (``apply_iceberg.ours_base``), by default (copy-on-write) and merging
on read: seconds per micro-batch after the first, larger ÷ smaller, medians of interleaved
repetitions."""

from __future__ import annotations

import shutil
from collections.abc import Callable

from tests.bench import apply
from tests.bench.apply_iceberg import (
    base_rows,
    merging_on_read,
    ours_base,
    ours_stream,
    registered,
)
from tests.bench.common import Bench, Figure, interleaved

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

            start = ours_stream(bench, source, run, catalog, apply.APPLIED)
            return count / apply.micro_batch_rates(count, start, firsts)

        return timed

    figures = []
    for merging in (False, True):
        names = {r: f"{r:,} rows" for r in (small_rows, large_rows)}
        sides = {names[r]: side(r, merging) for r in (small_rows, large_rows)}
        samples = interleaved(sides, bench.reps)
        shutil.rmtree(runs, ignore_errors=True)
        mode = ", merge-on-read" if merging else ""
        case = (
            f"Iceberg growth{mode}: {count:,} clustered changes a micro-batch, "
            f"{large_rows:,} ÷ {small_rows:,} rows"
        )
        large, small = names[large_rows], names[small_rows]
        figures.append(apply.growth_figure(BENCHMARK, case, samples, large, small))
    return figures
