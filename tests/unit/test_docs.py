"""The README and the docs pages say only what the code and the results hold.

Their option, error and benchmark tables are generated (``docs/generate.py``) and must equal
what the generator makes now; every ``spark_cdc`` name and repository path they mention must
exist; a measured figure (a number with a unit or a ratio: ``1.3x``, ``12 ms``, ``543 tests``)
may appear only inside a generated block, or be one of the few constants below that the test
reads from the code; the README stays short and every page is in the site's navigation.
No server: these run in the fast loop.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = _generator()
PAGES = [*generate.pages(), ROOT / "compose" / "README.md"]


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _prose(text: str) -> str:
    """``text`` without generated blocks and HTML comments, and of fenced code only its
    comments (where a hand-typed "about 20 minutes" would hide), line numbers kept."""

    def blank(match: re.Match[str]) -> str:
        return "\n" * match.group().count("\n")

    def comments(match: re.Match[str]) -> str:
        lines = match.group().split("\n")
        return "\n".join(re.sub(r"^(?:.*?\s)?#|^.*", "", line, count=1) for line in lines)

    text = generate.BLOCK.sub(blank, text)
    text = re.sub(r"^```.*?^```", comments, text, flags=re.DOTALL | re.MULTILINE)
    return re.sub(r"<!--.*?-->", blank, text, flags=re.DOTALL)


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_generated_blocks_are_what_the_generator_makes_now(page: Path) -> None:
    text = page.read_text()
    assert generate.regenerate(text) == text, (
        f"{_name(page)}: a generated table differs from the code or the results; run ./dev docs"
    )


def test_every_generated_table_is_on_a_page() -> None:
    used = {name for page in PAGES for name, _ in generate.blocks(page.read_text())}
    assert used == set(generate.RENDERERS)


def test_the_readme_is_one_or_two_screens_and_keeps_the_ci_test_command() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move the rest to docs/"
    assert any("./dev test" in line for line in lines), "CI runs the README's test command"


def test_every_docs_page_is_in_the_site_navigation() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def files(nav: object) -> set[str]:
        if isinstance(nav, str):
            return {nav}
        if isinstance(nav, dict):
            return set().union(*(files(v) for v in nav.values()))
        if isinstance(nav, list):
            return set().union(*(files(v) for v in nav)) if nav else set()
        return set()

    listed = files(config["nav"])
    pages = {p.name for p in DOCS.glob("*.md")}
    assert pages - listed == set(), "pages missing from mkdocs.yml nav"
    assert listed - pages == set(), "nav entries without a page"


# --- names and paths ------------------------------------------------------------------------

_MODULE = re.compile(r"(?<![\w.])spark_cdc(?:\.[A-Za-z_]\w*)+")
_PATH = re.compile(
    r"(?<![\w./-])((?:client|rewrite|server_plugin|tests|compose|docs)/[\w./-]*[\w/])"
)


def _resolves(dotted: str) -> bool:
    """``spark_cdc.a.b.C`` names a module, or an attribute of the longest module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.util.find_spec(".".join(parts[:cut]))
        except ModuleNotFoundError:  # a parent is no package: try a shorter prefix
            continue
        if found is None:
            continue
        obj: object = importlib.import_module(".".join(parts[:cut]))  # its errors are real
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _mentions(pattern: re.Pattern[str]) -> list[tuple[str, int, str]]:
    found = []
    for page in PAGES:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            found += [(_name(page), number, m.group(0)) for m in pattern.finditer(line)]
    return found


def test_every_spark_cdc_name_the_docs_use_exists() -> None:
    missing = [
        f"{page}:{line}: {name}"
        for page, line, name in _mentions(_MODULE)
        if not _resolves(name.rstrip("."))
    ]
    assert missing == [], "names the code does not have"


def test_every_repository_path_the_docs_name_exists() -> None:
    missing = [
        f"{page}:{line}: {path}"
        for page, line, path in _mentions(_PATH)
        if not (ROOT / path).exists() and path != generate.CHART_COPY.relative_to(ROOT).as_posix()
    ]
    assert missing == [], "paths the repository does not have"


_CONDITION = re.compile(r"(?<![\w.])([A-Z][A-Z0-9_]*)\.([A-Z][A-Z0-9_]*)\b")


def test_every_condition_of_ours_the_docs_name_is_in_the_registry() -> None:
    from spark_cdc.server_plugin.conditions import CONDITIONS

    families = {name.split(".")[0] for name in CONDITIONS}
    missing = [
        f"{page}:{line}: {name}"
        for page, line, name in _mentions(_CONDITION)
        if name.split(".")[0] in families and name not in CONDITIONS
    ]
    assert missing == [], "conditions spark_cdc.server_plugin.conditions does not have"


# --- figures ------------------------------------------------------------------------------

_UNITS = (
    "\u00d7|"  # the multiplication sign of a ratio
    r"x\b|%|ns\b|µs\b|us\b|ms\b|s\b|secs?\b|seconds?\b|min\b|minutes?\b|h\b|hours?\b"
    r"|[KMGT]i?B\b|[kKMG]\b(?=\s*rows)|rows/s\b|rows per second\b|tests\b|cores?\b|CPU\b"
)
_NUMBER = r"\d[\d,]*(?:\.\d+)?"
_FIGURE = re.compile(
    rf"(?<![\w.`/-])~?{_NUMBER}(?:\s?[\u2013-]\s?{_NUMBER})?\s?(?:{_UNITS})"  # ranges too
)

# Constants of the code the prose may state, each checked against the code it comes from.
CODE_FIGURES: dict[str, Callable[[], bool]] = {
    "4 MB": lambda: _partitions().MIN_PARTITION_BYTES == 4 << 20,
    "128 MB": lambda: _partitions().MAX_PARTITION_BYTES == 128 << 20,
    "128 KB": lambda: _partitions().FILE_OPEN_COST == 128 << 10,
    "64 MB": lambda: _partitions().RESOLVE_BYTES == 64 << 20,
    "16 MB": lambda: _partitions().GATHER_BYTES == 16 << 20,
    "2 GiB": lambda: _apply("delta.state").STATE_MEMORY_BYTES == 2 << 30,
    "1 GiB": lambda: _apply("engine.key_index").FILE_KEYS_BYTES == 1 << 30,
    "1280 MiB": lambda: _apply("engine.state_rows").STATE_ROWS_BYTES == 1280 << 20,
    "512 MiB": lambda: _apply("engine.state_rows").STATE_KEYS_BYTES == 512 << 20,
    "128 MiB": lambda: _apply("messages")._HELD_BYTES == 128 << 20,
    "32 MiB": lambda: (
        _apply("engine.columns").SMALL_FILE_BYTES == _apply("messages")._GROUP_BYTES == 32 << 20
    ),
    "1.5 s": lambda: round(sum(_iceberg_table().SETTLING_WAITS), 3) == 1.5,
    "30 s": lambda: importlib.import_module("spark_cdc.connection").SERVER_GONE_AFTER_S == 30,
}


def _partitions() -> ModuleType:
    return importlib.import_module("spark_cdc.server_plugin.changefeed.partitions")


def _apply(module: str) -> ModuleType:
    return importlib.import_module(f"spark_cdc.server_plugin.sinks.apply.{module}")


def _iceberg_table() -> ModuleType:
    return importlib.import_module("spark_cdc.server_plugin.iceberg.table")


def _stated_figures() -> list[tuple[str, int, str]]:
    found = []
    for page in PAGES:
        prose = _prose(page.read_text())
        for number, line in enumerate(prose.splitlines(), 1):
            line = re.sub(r"`[^`]*`", "", line)  # code: values a user writes, not measurements
            found += [(_name(page), number, m.group(0).strip()) for m in _FIGURE.finditer(line)]
    return found


def test_figures_come_only_from_the_results_or_the_code() -> None:
    hand_typed = [
        f"{page}:{line}: {figure!r}"
        for page, line, figure in _stated_figures()
        if figure not in CODE_FIGURES
    ]
    assert hand_typed == [], (
        "figures typed by hand: let the benchmark results (a generated block) state them, "
        "or drop them"
    )


@pytest.mark.parametrize("figure", sorted(CODE_FIGURES))
def test_the_constants_the_docs_state_are_the_codes(figure: str) -> None:
    assert CODE_FIGURES[figure](), f"the docs say {figure!r}; the code says otherwise"


def test_the_figure_check_catches_hand_typed_figures() -> None:
    """The check is only worth having if it fires: each of these must count as a figure."""
    figures = ("reads at 0.7\u00d7 the rate", "543 tests", "took 12 ms", "2 cores", "0.4-1.7 s")
    for text in figures:
        assert _FIGURE.search(text), text
    for text in ("Spark 4.3", "Python 3.10+", "Java 17 or 21", "port 15002", "version 3"):
        assert not _FIGURE.search(text), text
