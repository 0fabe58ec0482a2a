"""The results as a Markdown table (docs/benchmarks.md) and a PNG chart: one panel per
benchmark, a bar per case, its run-to-run spread as a whisker, the target drawn as a dashed
line."""

from __future__ import annotations

import re
import textwrap
from collections import defaultdict
from pathlib import Path

from tests.bench.common import Figure


def _target_value(target: str | None) -> float | None:
    found = re.search(r"[-+]?\d+(\.\d+)?", target or "")
    return float(found.group()) if found else None


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def table(figures: list[Figure]) -> str:
    lines = [
        "| benchmark | case | figure | value | spread | target | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        met = {True: "yes", False: "**no**", None: ""}[f.met]
        spread = f"{_number(f.spread[0])} to {_number(f.spread[1])}" if f.spread else ""
        lines.append(
            f"| {f.benchmark} | {f.case} | {f.ratio_label} | {_number(f.ratio)} "
            f"| {spread} | {f.target or ''} | {met} |"
        )
    return "\n".join(lines)


_COLORS = {None: "tab:gray", True: "tab:green", False: "tab:red"}


def draw_chart(figures: list[Figure], path: Path) -> None:
    """Panels in two columns, each as tall as its row's longest panel needs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: dict[tuple[str, str], list[Figure]] = defaultdict(list)
    for f in figures:
        if f.ratio is not None:
            panels[(f.benchmark, f.ratio_label)].append(f)
    if not panels:
        return
    items = list(panels.items())
    rows = [items[i : i + 2] for i in range(0, len(items), 2)]
    heights = [0.8 + 0.42 * max(len(group) for _, group in row) for row in rows]
    fig, axes = plt.subplots(
        len(rows),
        2,
        figsize=(15, sum(heights) + 0.3 * len(rows)),
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
    )
    for ax in axes.flat[len(items) :]:
        ax.axis("off")
    for ax, ((benchmark, label), group) in zip(axes.flat, items, strict=False):
        colors = [_COLORS[f.met] for f in group]
        names = [textwrap.fill(f.case, 44) for f in group]  # wrapped, never cut: bars must differ
        ax.barh(names, [f.ratio or 0 for f in group], color=colors)
        for y, f in enumerate(group):  # each bar's own target: cases may have different ones
            if f.spread:  # the run-to-run spread, as a whisker across the bar's end
                ax.hlines(y, *f.spread, color="black", linewidth=1.5)
                ax.vlines(f.spread, y - 0.15, y + 0.15, color="black", linewidth=1.5)
            target = _target_value(f.target)
            if target is not None:
                ax.vlines(target, y - 0.45, y + 0.45, color="black", linestyle="--", linewidth=1)
        ax.set_title(textwrap.fill(f"{benchmark}: {label}", 60), fontsize=10, loc="left")
        ax.tick_params(labelsize=8)
        ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
