"""The benchmark report: every figure reaches the docs/benchmarks.md table and the chart (no server:
the benchmarks themselves run with ``make bench``, never in the test suite)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.bench.common import Figure, at_least, interleaved, medians, paired_spread
from tests.bench.report import draw_chart, table

FIGURES = [
    Figure(
        "streaming",
        "100,000 rows/commit, 5 columns",
        "(b)/(a) rows/s",
        0.52,
        "≥ 0.4",
        True,
        spread=(0.48, 0.6),
    ),
    Figure("delta_source", "2M rows", "vs parquet rows/s", 0.31, "≥ 0.5", False),
    Figure("scaling", "1000 columns", "build ms", 12.5),
]


def test_the_table_lists_every_figure_with_its_target_and_verdict() -> None:
    assert table(FIGURES).splitlines() == [
        "| benchmark | case | figure | value | spread | target | met |",
        "|---|---|---|---|---|---|---|",
        "| streaming | 100,000 rows/commit, 5 columns | (b)/(a) rows/s | 0.52 | 0.48 to 0.6 "
        "| ≥ 0.4 | yes |",
        "| delta_source | 2M rows | vs parquet rows/s | 0.31 |  | ≥ 0.5 | **no** |",
        "| scaling | 1000 columns | build ms | 12.5 |  |  |  |",
    ]


def test_the_chart_is_a_png(tmp_path: Path) -> None:
    chart = tmp_path / "chart.png"
    draw_chart(FIGURES, chart)
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sides_alternate_and_the_median_is_reported() -> None:
    order: list[str] = []

    def side(name: str, value: float) -> Callable[[], float]:
        def run() -> float:
            order.append(name)
            return value

        return run

    samples = interleaved({"a": side("a", 1.0), "b": side("b", 3.0)}, reps=3)
    assert order == ["a", "b"] * 3
    assert medians(samples) == {"a": 1.0, "b": 3.0}
    assert paired_spread([2.0, 3.0, 6.0], [2.0, 2.0, 3.0]) == (1.0, 2.0)  # run by run
    assert at_least(0.4, 0.4) is True and at_least(0.39, 0.4) is False and at_least(None, 1) is None


def test_short_runs_repeat_until_every_side_has_run_long_enough() -> None:
    """A side of 0.25 s runs is repeated until it has 1 s in all (4 runs, not the 3 asked
    for); a long side does not stop it early, and ``most`` bounds it."""
    runs = {"short": lambda: 0.25, "long": lambda: 2.0}
    assert [len(v) for v in interleaved(runs, reps=3, at_least_s=1.0).values()] == [4, 4]
    assert [len(v) for v in interleaved(runs, reps=3, at_least_s=0.5).values()] == [3, 3]
    assert [len(v) for v in interleaved(runs, reps=1, at_least_s=100, most=6).values()] == [6, 6]
