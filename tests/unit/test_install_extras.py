"""The install line the README and getting-started give for ``spark-cdc serve`` and ``demo``
does what they say, in a fresh virtualenv (issue 77: ``[pyspark]`` alone, as they said then,
ran neither: no deltalake).

Installed as pip would, without downloading anything: the project's wheel with ``--no-deps``
(``--no-index``) into a fresh venv, and every distribution the extras' declared requirements
reach (read from the installed wheel's metadata, markers evaluated) linked in from this test
environment, which has them all. So the venv holds what the install line brings and nothing
else, and a command that needs something the extras do not declare fails here as it does on
a user's machine. Each command is run up to the first thing past its dependency checks that
needs no JVM: ``serve`` on a port in use, ``demo`` against a port nobody listens on.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import venv
from collections.abc import Iterator
from importlib.metadata import Distribution, distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from spark_cdc.testing.local_server import free_port

from tests.support.processes import Command

pytestmark = pytest.mark.slow  # builds the wheel, makes virtualenvs: seconds, no download

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", ROOT / "docs" / "getting-started.md")
_INSTALL = re.compile(r"pip install '/path/to/spark-cdc-connect\[([\w,]+)\]'")


def documented_extras(page: Path) -> set[str]:
    """The extras of the install line ``page`` gives for ``spark-cdc serve`` / ``demo``."""
    lines = [line for line in page.read_text().splitlines() if re.search(r"serve\b.*demo", line)]
    found = {match for line in lines for match in _INSTALL.findall(line)}
    assert len(found) == 1, f"{page.name}: one install line for serve / demo, not {found}"
    return set(found.pop().split(","))


def reached(requirements: list[str], extras: set[str]) -> set[str]:
    """The distributions ``requirements`` (of a package installed with ``extras``) reach,
    transitively, as installed in this environment."""
    asked: dict[str, set[str]] = {}
    todo = [(text, extras) for text in requirements]
    while todo:
        text, context = todo.pop()
        requirement = Requirement(text)
        marker = requirement.marker
        if marker and not any(marker.evaluate({"extra": e}) for e in context or {""}):
            continue
        name = canonicalize_name(requirement.name)
        new = set(requirement.extras) - asked.get(name, set())
        if name in asked and not new:
            continue
        asked.setdefault(name, set()).update(requirement.extras)
        todo += [(t, new) for t in distribution(name).requires or []]
    return set(asked)


def _link(name: str, site: Path) -> None:
    """Link distribution ``name``'s top-level files from this environment into ``site``."""
    found: Distribution = distribution(name)
    here = Path(str(found.locate_file("")))
    tops = {Path(str(f)).parts[0] for f in found.files or []} - {"..", "__pycache__"}
    for top in tops:
        if (here / top).exists() and not (site / top).exists():
            (site / top).symlink_to(here / top)


def _pip(python: Path, *args: str) -> None:
    """This environment's pip, installing into ``python``'s (which has none)."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(python)]
    done = subprocess.run(
        [*pip, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


def fresh_venv(folder: Path, wheel: Path, extras: set[str]) -> Path:
    """A venv of the project's wheel and exactly what ``extras`` bring; its python."""
    venv.create(folder, with_pip=False)
    python = folder / "bin" / "python"
    _pip(python, "install", "-q", "--no-deps", "--no-index", str(wheel))
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (ours,) = Distribution.discover(name="spark-cdc-connect", path=[str(site)])
    for name in sorted(reached(ours.requires or [], extras)):
        _link(name, site)
    return python


@pytest.fixture(scope="module")
def port_in_use() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield int(taken.getsockname()[1])


def test_the_pages_give_one_install_line_for_serve_and_demo() -> None:
    assert documented_extras(PAGES[0]) == documented_extras(PAGES[1]) == {"pyspark", "server"}


def test_the_documented_extras_run_serve_and_demo(
    tmp_path: Path, wheel: Path, port_in_use: int
) -> None:
    python = fresh_venv(tmp_path / "venv", wheel, documented_extras(PAGES[0]))
    serve = Command("serve", "--port", str(port_in_use), python=python)
    assert serve.finish() == 1
    assert "SPARK_CDC_LOCAL_SERVER.PORT_IN_USE" in serve.output, serve.output
    demo = Command("demo", "--remote", f"sc://localhost:{free_port()}", python=python)
    assert demo.finish() == 1
    assert "SPARK_CDC_CONNECTION.UNREACHABLE" in demo.output, demo.output


def test_pyspark_alone_starts_no_server(tmp_path: Path, wheel: Path, port_in_use: int) -> None:
    """What the venv above would catch: ``[pyspark]`` alone lacks deltalake, and says so."""
    python = fresh_venv(tmp_path / "venv", wheel, {"pyspark"})
    serve = Command("serve", "--port", str(port_in_use), python=python)
    assert serve.finish() == 1
    assert "DELTA_CHANGELOG.MISSING_DEPENDENCY" in serve.output, serve.output
    assert "spark-cdc-connect[server]" in serve.output
