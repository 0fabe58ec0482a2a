"""One ``spark_cdc`` namespace over the design card's folders, and layers that depend one way.

What a user installs puts no generic top-level name (``client``, ``rewrite``,
``server_plugin``) on ``sys.path``; ``rewrite/`` imports nothing of the client above it, and
``server_plugin/`` (shipped to servers by value) nothing of either. Within the client, the
command line (``spark_cdc.cli``) sits on top: nothing else of ours imports it, the testing
tools may import all but it, and PySpark's patches (``spark_cdc.compat``) neither it nor the
testing tools. That a user's own modules of those names do not break ours needs a server:
tests/server/test_user_modules_do_not_shadow.py.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from spark_cdc.testing.local_server import DISCOVERY_MODULES

ROOT = Path(__file__).resolve().parents[2]


def _imports(folder: Path) -> dict[str, set[str]]:
    """Every module each file of ``folder`` (or the file ``folder``) imports, by absolute
    name."""
    found: dict[str, set[str]] = {}
    for path in [folder] if folder.is_file() else sorted(folder.rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        found[str(path.relative_to(ROOT))] = names
    return found


ROOMS = ("cli", "compat", "testing")  # the client's subpackages, each a room of its own
LAYERS = {"client", *ROOMS, "rewrite", "server_plugin"}


def _layer(module: str) -> str | None:
    """Which layer a module of ours belongs to: rewrite, server_plugin, one of the client's
    rooms (cli, compat, testing) or client (the rest of the package root); None for anything
    else. The old top-level names count as theirs."""
    parts = module.split(".")
    if parts[0] in ("rewrite", "server_plugin"):
        return parts[0]
    if parts[0] not in ("client", "spark_cdc"):
        return None
    if len(parts) > 1 and parts[1] in ("rewrite", "server_plugin", *ROOMS):
        return parts[1]
    return "client"


@pytest.mark.parametrize(
    ("folder", "allowed"),
    [
        ("client/cli", LAYERS),
        ("client/compat", LAYERS - {"cli", "testing"}),
        ("client/testing", LAYERS - {"cli"}),
        ("rewrite", {"rewrite", "server_plugin"}),
        ("server_plugin", {"server_plugin"}),
    ],
)
def test_layers_import_nothing_above_them(folder: str, allowed: set[str]) -> None:
    for path, names in _imports(ROOT / folder).items():
        upward = {n for n in names if _layer(n) not in (None, *allowed)}
        assert not upward, f"{path} imports a layer above it: {sorted(upward)}"


def _module_of(path: str) -> str:
    """``server_plugin/delta/log.py`` → ``spark_cdc.server_plugin.delta.log``."""
    return "spark_cdc." + path.removesuffix(".py").replace("/", ".")


PARTS = (
    "row_level",
    "changefeed",
    "delta",
    "iceberg",
    "postgres",
    "sinks",
)  # server_plugin's folders


def _part(module: str) -> str | None:
    """Which part of ``server_plugin`` a module of it belongs to: one of ``PARTS``, or
    ``root`` for the modules its root holds; None outside ``server_plugin``."""
    parts = module.split(".")
    if parts[:2] != ["spark_cdc", "server_plugin"]:
        return None
    return parts[2] if len(parts) > 2 and parts[2] in PARTS else "root"


@pytest.mark.parametrize(
    ("part", "allowed"),
    [
        ("root", {"root"}),
        ("row_level", {"root", "row_level"}),
        ("changefeed", {"root", "row_level", "changefeed"}),
        ("delta", {"root", "row_level", "changefeed", "delta"}),
        ("iceberg", {"root", "row_level", "changefeed", "iceberg"}),
        ("postgres", {"root", "changefeed", "postgres"}),
        ("sinks", {"root", *PARTS}),
    ],
)
def test_server_parts_import_only_what_is_beneath_them(part: str, allowed: set[str]) -> None:
    """The map in server_plugin/__init__.py: the root imports none of the folders, the
    shared change-feed machinery no format, a format no other format, nothing a sink."""
    files = _imports(ROOT / "server_plugin")
    mine = {p: n for p, n in files.items() if _part(_module_of(p)) == part}
    assert mine, f"no module of server_plugin is in {part}"
    for path, names in mine.items():
        above = sorted(n for n in names if _part(n) not in (None, *allowed))
        assert not above, f"{path} imports a part of server_plugin above it: {above}"


def _name(path: str) -> str:
    """A source file's import name: ``client/cli/main.py`` → ``spark_cdc.cli.main``,
    ``server_plugin/delta/__init__.py`` → ``spark_cdc.server_plugin.delta``."""
    parts = path.removesuffix(".py").split("/")
    if parts[0] == "client":
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["spark_cdc", *parts])


def _graph() -> dict[str, set[str]]:
    """Each module of ours and the modules of ours it imports (inside a function or under
    ``TYPE_CHECKING`` too: a lazy import is still a dependency), its own packages aside
    (Python runs them first anyway)."""
    files: dict[str, set[str]] = {}
    for folder in ("client", "rewrite", "server_plugin"):
        files |= _imports(ROOT / folder)
    names = {_name(path): imported for path, imported in files.items()}
    return {
        module: {
            other
            for other in imported
            if other in names and other != module and not module.startswith(other + ".")
        }
        for module, imported in names.items()
    }


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_itself_through_others() -> None:
    graph = _graph()
    assert "spark_cdc.server_plugin.errors" in graph["spark_cdc.server_plugin.sinks.apply.task"]
    assert _circles(graph) == []


APPLY = "spark_cdc.server_plugin.sinks.apply"


def test_the_apply_engine_imports_no_table_format() -> None:
    """``sinks/apply/engine/`` knows the formats only by ``engine.formats.TableFormat``:
    none of its modules imports a format of ``apply`` (``delta/``, ``iceberg/``), a source's
    format package, or a format's library; each format imports the engine, never the other
    format. A third format is one folder beside the two."""
    files = _imports(ROOT / "server_plugin" / "sinks" / "apply")
    formats = ("delta", "iceberg")
    engine = {p: n for p, n in files.items() if "/apply/engine/" in p}
    assert len(engine) > 10
    for path, names in engine.items():
        held = sorted(
            n
            for n in names
            if n.split(".")[0] in ("deltalake", "pyiceberg")
            or any(n.startswith(f"{APPLY}.{f}") for f in formats)
            or any(n.startswith(f"spark_cdc.server_plugin.{f}") for f in formats)
        )
        assert not held, f"{path} imports a table format: {held}"
    for mine, other in (formats, formats[::-1]):
        for path, names in files.items():
            if f"/apply/{mine}/" in path:
                crossing = sorted(n for n in names if n.startswith(f"{APPLY}.{other}"))
                assert not crossing, f"{path} imports the other format: {crossing}"


# A module past this many lines holds more than one idea; the condition registry is data.
MODULE_LINES = 450
DATA_MODULES = {"server_plugin/conditions.py"}


def test_no_module_is_longer_than_one_idea() -> None:
    long = {
        str(path.relative_to(ROOT)): count
        for folder in ("client", "rewrite", "server_plugin")
        for path in (ROOT / folder).rglob("*.py")
        if (count := len(path.read_text().splitlines())) > MODULE_LINES
    }
    assert set(long) == DATA_MODULES, long


def test_nothing_but_the_command_line_imports_it() -> None:
    """``spark_cdc.cli`` is imported by its own modules and by ``python -m spark_cdc``
    (``client/__main__.py``) only."""
    found: dict[str, set[str]] = {}
    for place in ("client", "rewrite", "server_plugin", "pyspark_delta_changelog.py"):
        found |= _imports(ROOT / place)
    assert "client/cli/main.py" in found  # the walk reaches the command line itself
    for path, names in found.items():
        if path.startswith("client/cli/") or path == "client/__main__.py":
            continue
        cli = sorted(n for n in names if _layer(n) == "cli")
        assert not cli, f"{path} imports the command line: {cli}"


def test_the_server_side_import_loads_no_connect_client() -> None:
    """A server's Python worker imports the plugin through the package root: that must not
    pull in PySpark's Connect client (pandas, grpc), which costs every task's collection."""
    program = (
        "import sys\n"
        f"import {', '.join(DISCOVERY_MODULES)}\n"
        "heavy = [m for m in ('pandas', 'grpc', 'pyspark.sql.connect') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow  # builds the wheel (tests/conftest.py)
def test_the_wheel_installs_one_namespace_and_the_discovery_module(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"spark_cdc", *(f"{m}.py" for m in DISCOVERY_MODULES)}
    for needed in (
        "spark_cdc/__init__.py",
        "spark_cdc/py.typed",
        "spark_cdc/rewrite/post_process.py",
        "spark_cdc/server_plugin/vocabulary.py",
        "spark_cdc/server_plugin/delta/source.py",
    ):
        assert needed in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "spark-cdc = spark_cdc.cli.main:entry" in text
