"""The package's import graph, read from its sources (every import, also those inside a
function or under ``TYPE_CHECKING``: a lazy import is still a dependency): no circle, and
layers that depend one way, ``client → rewrite → server_plugin`` (the server plugin is
shipped to servers alone)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Each source folder and the package it installs as.
PACKAGES = {
    "client": "spark_cdc",
    "rewrite": "spark_cdc.rewrite",
    "server_plugin": "spark_cdc.server_plugin",
}
LAYERS = ("spark_cdc.server_plugin", "spark_cdc.rewrite", "spark_cdc")  # lowest first


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


MODULES = _modules()


def _imported(name: str, path: Path) -> set[str]:
    """The package's modules ``name`` imports; not its own packages (Python runs them
    before it anyway)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([module] if module else [])])
            submodules = [f"{module}.{a.name}" for a in node.names]
            found.update(m for m in submodules if m in MODULES)
            if not all(m in MODULES for m in submodules):
                found.add(module)
    return {m for m in found if m in MODULES and m != name and not name.startswith(m + ".")}


GRAPH = {name: _imported(name, path) for name, path in MODULES.items()}


def _circles() -> Iterator[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(module: str) -> Iterator[list[str]]:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(GRAPH[module]):
            if other not in index:
                yield from visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == module:
                    break
            if len(component) > 1:
                yield sorted(component)

    for module in sorted(GRAPH):
        if module not in index:
            yield from visit(module)


def _layer(module: str) -> int:
    return next(i for i, p in enumerate(LAYERS) if module == p or module.startswith(p + "."))


def test_the_graph_is_read_whole() -> None:
    """The reader finds what it must (else the checks below pass on nothing)."""
    assert len(MODULES) > 100
    assert "spark_cdc.server_plugin.errors" in GRAPH["spark_cdc.server_plugin.sinks.apply.sink"]
    assert "spark_cdc.rewrite.post_process" in GRAPH["spark_cdc.rewrite"]


def test_no_module_imports_itself_through_others() -> None:
    assert list(_circles()) == []


def test_layers_depend_one_way() -> None:
    """A module imports from its own layer or a lower one: the client from the rewrite and
    the server plugin, the rewrite from the server plugin's leaves, the server plugin from
    itself alone."""
    upward = [
        f"{module} imports {other}"
        for module, imported in sorted(GRAPH.items())
        for other in sorted(imported)
        if _layer(other) > _layer(module)
    ]
    assert upward == []
