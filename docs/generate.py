"""Write the docs' generated tables from the code and the benchmark results.

    python docs/generate.py           # rewrite every generated block (what ``./dev docs`` runs)
    python docs/generate.py --check   # exit 1 naming the blocks that differ, change nothing

A block is the text between ``<!-- generated: NAME -->`` and ``<!-- end -->`` in README.md or
a page under docs/. The tables come from the registries every layer raises and validates with
(``spark_cdc.server_plugin.conditions.CONDITIONS``, ``spark_cdc.server_plugin.cdc_options.OPTIONS``)
and from ``tests/bench/results/results.json`` (rendered by ``tests.bench.report``, as
``./dev bench`` prints it), so a table cannot drift from what it describes and no measured
figure is typed by hand. ``tests/unit/test_docs.py`` fails when a block is stale.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: tests.bench lives in the checkout
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "tests" / "bench" / "results" / "results.json"

NONE = "\u2013"  # an en dash: a cell with nothing in it

BLOCK = re.compile(
    r"(?P<open><!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(?P<close><!-- end -->)",
    re.DOTALL,
)


def pages() -> list[Path]:
    """Every file that may hold generated blocks: the README and the docs pages."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _cell(text: str) -> str:
    """A table cell: pipes escaped; outside code spans, ``<name>`` shown, not taken for HTML,
    and ``_``/``*`` shown, not taken for emphasis."""
    parts = re.split(r"(`[^`]*`)", text.replace("|", "\\|").replace("\n", " "))
    return "".join(p if p.startswith("`") else _plain(p) for p in parts)


def _plain(text: str) -> str:
    for char, escaped in (("<", "&lt;"), (">", "&gt;"), ("_", "\\_"), ("*", "\\*")):
        text = text.replace(char, escaped)
    return text


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def options_table(scope: str) -> str:
    from spark_cdc.server_plugin.cdc_options import OPTIONS

    lines = ["| option | default | values | meaning |", "|---|---|---|---|"]
    for o in OPTIONS:
        if o.scope == scope:
            lines.append(
                f"| `{o.name}` | {_code(o.default) or NONE} | {_cell(o.values)} "
                f"| {_cell(o.description)} |"
            )
    if len(lines) == 2:
        raise ValueError(f"no option has scope {scope!r}")
    return "\n".join(lines)


def errors_table() -> str:
    from spark_cdc.server_plugin.conditions import CONDITIONS

    lines = ["| condition | parameters | message |", "|---|---|---|"]
    for name, condition in sorted(CONDITIONS.items()):
        params = ", ".join(f"`{p}`" for p in condition.parameters) or NONE
        lines.append(f"| `{name}` | {params} | {_cell(condition.message)} |")
    return "\n".join(lines)


def _results() -> dict:
    return json.loads(RESULTS.read_text())


def _figures() -> list:
    from tests.bench.common import Figure

    return [Figure.from_json(data) for data in _results()["figures"]]


def bench_figures() -> str:
    from tests.bench.report import table

    return table(_figures())


def bench_of(*benchmarks: str) -> str:
    """Some benchmarks' figures, as the results table shows them."""
    from tests.bench.report import table

    figures = [f for f in _figures() if f.benchmark in benchmarks]
    if not figures:
        return f"Not measured yet: `./dev bench --only {','.join(benchmarks)}` measures it."
    return table(figures)


def bench_default_partitions() -> str:
    """The defaults benchmark's figure, and each side's seconds."""
    return _with_medians("default_partitions", "seconds (median)")


def _with_medians(benchmark: str, measure: str = "value") -> str:
    """A benchmark's figure, and its first figure's medians (with each run's, if any)."""
    figures = [f for f in _figures() if f.benchmark == benchmark]
    if not figures:
        return bench_of(benchmark)
    samples = figures[0].samples
    rows = [
        f"| side | {measure} |" + (" each run |" if samples else ""),
        "|---|---|" + ("---|" if samples else ""),
    ]
    for name, value in figures[0].medians.items():
        taken = samples.get(name, [])  # a measure of the whole run (peak memory) has none
        runs = f" {', '.join(f'{v:g}' for v in taken)} |" if samples else ""
        rows.append(f"| {name} | {value:g} |{runs}")
    return bench_of(benchmark) + "\n\n" + "\n".join(rows)


def bench_envelopes_line() -> str:
    """The envelopes benchmark in one sentence, for the README."""
    figures = [f for f in _figures() if f.benchmark == "envelopes"]
    if not figures:
        return bench_of("envelopes")
    f = figures[0]
    met = "met" if f.met else "not met"
    return (
        f"{f.case}: {f.ratio} of the speed of Spark's own `from_json` of the same column "
        f"(target {f.target}, {met})."
    )


def bench_long_lived() -> str:
    """The long-lived server's figures, and their counts side by side (a column per server,
    named by what follows "on" in its case)."""
    figures = [f for f in _figures() if f.benchmark == "long_lived" and f.medians]
    if not figures:
        return bench_of("long_lived")
    rows = [
        "| | " + " | ".join(f.case.split(" on ", 1)[-1] for f in figures) + " |",
        "|---|" + "---|" * len(figures),
    ]
    for name in figures[0].medians:
        rows.append(f"| {name} | " + " | ".join(f"{f.medians.get(name, 0):g}" for f in figures) + " |")
    return bench_of("long_lived") + "\n\n" + "\n".join(rows)


def bench_machine() -> str:
    """The machine and settings of the run, as the results record them (no commit ids)."""
    results = _results()
    m = results["machine"]
    conf = results.get("server_conf", {})
    settings = ", ".join(
        f"`{key}={conf[key]}`"
        for key in ("spark.sql.shuffle.partitions", "spark.driver.extraJavaOptions")
        if key in conf
    )
    date = str(m.get("date", ""))[:10]
    text = (
        f"Run of {date}: {m['cpus']} cores ({m['cpu_model']}), {m['memory_gib']} GiB, "
        f"Python {m['python']}, Java {m['java']}, pyspark {m['pyspark']}, "
        f"pyarrow {m['pyarrow']}, deltalake {m['deltalake']}; {settings}; "
        f"{results['reps']} repetitions per side."
    )
    kept = results.get("kept_from_earlier_runs") or []
    if kept:
        measured = sorted({f["benchmark"] for f in results["figures"]} - set(kept))
        text += f" This run measured {', '.join(f'`{n}`' for n in measured)}; the others' "
        text += "figures are kept from earlier runs."
    rerun = results.get("rerun_separately")
    if rerun:
        names = ", ".join(f"`{n}`" for n in rerun["benchmarks"])
        text += f" Re-run alone after the full run, on the same machine: {names}."
    return text


_SIDES = ("(a) raw", "(b) ChangelogReader", "(c) foreachBatch window", "(d) client plan")


def bench_streaming_rates() -> str:
    """Changelog rows per second of each side of the streaming benchmark, per case."""
    header = [*_SIDES, "(a) running", "(b) running"]
    rows: dict[str, dict[str, float]] = {}
    for f in _results()["figures"]:
        if f["benchmark"] != "streaming":
            continue
        if f["ratio_label"].endswith("running"):
            row = rows.setdefault(f["case"], {})
            row.update({f"{side[:3]} running": v for side, v in f["medians"].items()})
        elif set(f["medians"]) >= set(_SIDES):
            rows.setdefault(f["case"], {}).update(f["medians"])
    lines = [
        "| case | " + " | ".join(header) + " |",
        "|---" * (len(header) + 1) + "|",
    ]
    for case, row in rows.items():
        cells = [f"{row[h]:,.0f}" if h in row else "" for h in header]
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# The apply benchmark's case of a target with deletion vectors: the default target's case
# with this after it (tests/bench/apply.py).
DV_CASE = ", with deletion vectors"


def bench_apply() -> str:
    """``apply_changes`` beside a hand-written ``foreachBatch`` MERGE and a raw read, changes
    per second per case (after a stream's first micro-batch, and its first), with the
    applying process's peak memory, how a micro-batch's time grows with the target, and the
    latency."""
    figures = [f for f in _figures() if f.benchmark == "apply"]
    if not figures:
        return "Not measured yet: `./dev bench --only apply` measures it."
    lines = [
        "| case | ours | hand-written | ours ÷ hand-written | with deletion vectors: ours ÷ "
        "hand-written | first micro-batch: ours ÷ hand-written | one-time start-up: ours, "
        "hand-written | raw read | peak memory (ours) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    with_dv = {f.case.removesuffix(DV_CASE): f.ratio for f in figures if f.case.endswith(DV_CASE)}
    for f in figures:
        if "raw read" not in f.medians:
            continue
        m = f.medians
        first = m.get("first micro-batch ratio", "not measured")
        start_up = "not measured"
        if "start-up s (ours)" in m:
            start_up = f"{m['start-up s (ours)']} s, {m['start-up s (hand-written)']} s"
        lines.append(
            f"| {f.case} | {m['ours']:,.0f}/s | {m['hand-written']:,.0f}/s | {f.ratio} | "
            f"{with_dv.get(f.case, 'not measured')} | {first} | {start_up} | "
            f"{m['raw read']:,.0f}/s | {m.get('peak MB (ours)', 0):,.0f} MB |"
        )
    for f in figures:
        if f.case.startswith("growth"):
            lines.append(
                f"\n{f.case[:1].upper()}{f.case[1:]}: {f.ratio} ({f.notes}; target {f.target})."
            )
    for f in figures:
        if "seconds" in f.medians:
            lines.append(
                f"\n{f.case[:1].upper()}{f.case[1:]}: {f.medians['seconds']} s from a source "
                f"commit to the change in the target, {f.ratio} trigger intervals (target "
                f"{f.target})."
            )
    return "\n".join(lines)


def bench_first_load() -> str:
    """The first-load figures, and each case's seconds: ours, Spark's Parquet write and
    Spark's own exact plan (``tests.bench.first_load``), with ours' peak memory."""
    figures = [f for f in _figures() if f.benchmark == "first_load"]
    exact = "Spark's exact plan"
    rows = [
        f"| case | ours | df.write.parquet | {exact} | {exact} ÷ ours | peak memory (ours) |",
        "|---|---|---|---|---|---|",
    ]
    for f in figures:
        m = f.medians
        if exact not in m:  # measured before the exact plan was
            continue
        rows.append(
            f"| {f.case} | {m['ours']} s | {m['df.write.parquet']} s | {m[exact]} s | "
            f"{m[exact + '/ours']} | {m['peak MB (ours, any one Python process)']:,} MB |"
        )
    table = "\n".join(rows) if len(rows) > 2 else ""
    return "\n\n".join(part for part in (bench_of("first_load"), table) if part)


def layout() -> str:
    """Each folder of the package, its import name (``pyproject.toml``'s package-dir) and its
    modules, as they are on disk."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[tool.setuptools.package-dir]", 1)[1].split("\n[", 1)[0]
    lines = ["| folder | import name | modules |", "|---|---|---|"]
    for name, folder in re.findall(r'^"([\w.]+)" = "([\w/]+)"', section, re.MULTILINE):
        modules = sorted(
            p.stem if p.is_file() else f"{p.name}/"
            for p in (ROOT / folder).iterdir()
            if (p.suffix == ".py" and not p.stem.startswith("__"))
            or (p.is_dir() and (p / "__init__.py").exists() and f"{folder}/{p.name}" not in text)
        )
        lines.append(f"| `{folder}/` | `{name}` | {', '.join(f'`{m}`' for m in modules)} |")
    return "\n".join(lines)


def bench_apply_more() -> str:
    """``apply_changes`` into Iceberg targets beside pyiceberg's own jobs, and scheduled
    runs whole beside the hand-written MERGE job (the benchmarks page's)."""
    shown = ("apply_iceberg", "apply_iceberg_growth", "apply_scheduled")
    figures = [f for f in _figures() if f.benchmark in shown]
    if not figures:
        return "Not measured yet: `./dev bench --only apply` measures it."
    lines: list[str] = []
    iceberg = [f for f in figures if f.benchmark == "apply_iceberg"]
    growth = [f for f in figures if f.benchmark == "apply_iceberg_growth"]
    if iceberg:
        lines += [
            "| Iceberg target | ours | pyiceberg's own job | ours ÷ theirs | peak memory (ours) |",
            "|---|---|---|---|---|",
        ]
    for f in iceberg:
        theirs = next(k for k in f.medians if k not in ("ours", "peak MB (ours)"))
        m = f.medians
        peak = f"{m['peak MB (ours)']:,.0f} MB" if "peak MB (ours)" in m else "not measured"
        lines.append(
            f"| {f.case} | {m['ours']:,.0f}/s | {theirs}: {m[theirs]:,.0f}/s | {f.ratio} | {peak} |"
        )
    if growth:
        lines += ["", "| Iceberg target's growth | seconds a micro-batch | larger ÷ smaller |"]
        lines.append("|---|---|---|")
    for f in growth:
        each = ", ".join(f"{k}: {v} s" for k, v in f.medians.items())
        lines.append(f"| {f.case} | {each} | {f.ratio} |")
    scheduled = [f for f in figures if f.benchmark == "apply_scheduled"]
    if scheduled:
        lines += [
            "",
            "| scheduled run (`availableNow`), whole | ours | hand-written | hand-written ÷ ours |",
            "|---|---|---|---|",
        ]
    for f in scheduled:
        m = f.medians
        lines.append(f"| {f.case} | {m['ours']} s | {m['hand-written']} s | {f.ratio} |")
    return "\n".join(lines).strip("\n")


RENDERERS: dict[str, Callable[[], str]] = {
    "layout": layout,
    "options-cdc": lambda: options_table("cdc"),
    "options-reader": lambda: options_table("reader"),
    "options-source": lambda: options_table("source"),
    "options-iceberg": lambda: options_table("iceberg"),
    "errors": errors_table,
    "bench-machine": bench_machine,
    "bench-figures": bench_figures,
    "bench-streaming-rates": bench_streaming_rates,
    "bench-apply": bench_apply,
    "bench-apply-more": bench_apply_more,
    "bench-iceberg": lambda: bench_of("iceberg_source"),
    "bench-postgres": lambda: bench_of("postgres_source", "postgres_follow"),
    "bench-default-partitions": bench_default_partitions,
    "bench-long-lived": bench_long_lived,
    "bench-snapshot": lambda: bench_of("snapshot"),
    "bench-envelopes": lambda: _with_medians("envelopes", "seconds (median)"),
    "bench-envelopes-line": bench_envelopes_line,
    "bench-snapshot-medians": lambda: _with_medians("snapshot", "seconds (median)"),
    "bench-first-load": bench_first_load,
}


def blocks(text: str) -> Iterator[tuple[str, str]]:
    """(name, body) of every generated block in ``text``."""
    for match in BLOCK.finditer(text):
        yield match["name"], match["body"]


def regenerate(text: str) -> str:
    """``text`` with every generated block rendered anew; an unknown block name raises."""

    def render(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in RENDERERS:
            raise KeyError(f"unknown generated block {name!r}; known: {sorted(RENDERERS)}")
        return f"{match['open']}{RENDERERS[name]().rstrip()}\n{match['close']}"

    return BLOCK.sub(render, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report stale blocks, write nothing")
    args = parser.parse_args(argv)
    stale = []
    for page in pages():
        text = page.read_text()
        new = regenerate(text)
        if new != text:
            stale.append(str(page.relative_to(ROOT)))
            if not args.check:
                page.write_text(new)
    if args.check:
        if stale:
            print(f"generated blocks are stale in: {', '.join(stale)} (run ./dev docs)")
        return 1 if stale else 0
    print(f"docs: regenerated {', '.join(stale) or 'nothing (all blocks current)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
