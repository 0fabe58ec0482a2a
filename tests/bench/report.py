"""The results as a Markdown table (README) and a PNG chart: one panel per benchmark, a bar
per case, the target drawn as a line."""

from __future__ import annotations

import re
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
    lines = ["| benchmark | case | figure | value | target | met |", "|---|---|---|---|---|---|"]
    for f in figures:
        met = {True: "yes", False: "**no**", None: ""}[f.met]
        lines.append(
            f"| {f.benchmark} | {f.case} | {f.ratio_label} | {_number(f.ratio)} "
            f"| {f.target or ''} | {met} |"
        )
    return "\n".join(lines)


_COLORS = {None: "tab:gray", True: "tab:green", False: "tab:red"}


def draw_chart(figures: list[Figure], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: dict[tuple[str, str], list[Figure]] = defaultdict(list)
    for f in figures:
        if f.ratio is not None:
            panels[(f.benchmark, f.ratio_label)].append(f)
    if not panels:
        return
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.2 + 0.9 * len(figures)), squeeze=False)
    for ax, ((benchmark, label), group) in zip(axes[:, 0], panels.items(), strict=True):
        colors = [_COLORS[f.met] for f in group]
        ax.barh([f.case for f in group], [f.ratio or 0 for f in group], color=colors)
        for target in {_target_value(f.target) for f in group} - {None}:
            ax.axvline(target, color="black", linestyle="--", linewidth=1)
        ax.set_title(f"{benchmark}: {label}", fontsize=10, loc="left")
        ax.tick_params(labelsize=8)
        ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
