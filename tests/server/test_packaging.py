"""One ``spark_cdc`` namespace over the design card's folders, and layers that depend one way.

What a user installs puts no generic top-level name (``client``, ``rewrite``,
``server_plugin``) on ``sys.path``; a user's own modules of those names do not break ours;
``rewrite/`` imports nothing of the client above it, and ``server_plugin/`` (shipped to
servers by value) nothing of either.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _imports(folder: Path) -> dict[str, set[str]]:
    """Every module each file of ``folder`` imports, by absolute name."""
    found: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        found[str(path.relative_to(ROOT))] = names
    return found


def _layer(module: str) -> str | None:
    """Which layer a module of ours belongs to: client (the package root), rewrite or
    server_plugin; None for anything else. The old top-level names count as theirs."""
    parts = module.split(".")
    if parts[0] in ("client", "rewrite", "server_plugin"):
        return parts[0]
    if parts[0] != "spark_cdc":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in ("rewrite", "server_plugin") else "client"


@pytest.mark.parametrize(
    ("folder", "allowed"),
    [("rewrite", {"rewrite", "server_plugin"}), ("server_plugin", {"server_plugin"})],
)
def test_layers_import_nothing_above_them(folder: str, allowed: set[str]) -> None:
    for path, names in _imports(ROOT / folder).items():
        upward = {n for n in names if _layer(n) not in (None, *allowed)}
        assert not upward, f"{path} imports a layer above it: {sorted(upward)}"


def test_a_users_client_and_rewrite_modules_do_not_shadow_ours(
    tmp_path: Path, spark_remote: str
) -> None:
    for name in ("client", "rewrite", "server_plugin", "errors", "names"):
        (tmp_path / f"{name}.py").write_text(f"raise ImportError('the user\\'s own {name}')\n")
    program = (
        "from pyspark.sql import SparkSession\n"
        "from spark_cdc import ChangelogReader, ChangelogSpec, post_process\n"
        "import spark_cdc.rewrite, spark_cdc.server_plugin.delta.source\n"
        f"spark = SparkSession.builder.remote({spark_remote!r}).create()\n"
        "df = ChangelogReader(spark).option('rowId', 'id').changes('/nowhere')\n"
        "spec = ChangelogSpec(row_id=['id'])\n"
        "post_process(spark.range(1).selectExpr('id', \"'insert' _change_type\"), spec)\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok")


def test_the_server_side_import_loads_no_connect_client() -> None:
    """A server's Python worker imports the plugin through the package root: that must not
    pull in PySpark's Connect client (pandas, grpc), which costs every task's collection."""
    program = (
        "import sys\n"
        "import pyspark_delta_changelog\n"
        "heavy = [m for m in ('pandas', 'grpc', 'pyspark.sql.connect') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (built,) = out.glob("spark_cdc_connect-*.whl")
    return built


def test_the_wheel_installs_one_namespace_and_the_discovery_module(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"spark_cdc", "pyspark_delta_changelog.py"}
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
