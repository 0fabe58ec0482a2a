"""CI takes its Debian mirror from the machine's apt sources, and the project names none.

A mirror written into the project is one a machine behind its own mirror (or none) cannot
reach: ``.ci/run``'s ``apt_mirror`` reads the bookworm entry of the apt sources (one-line
``.list`` or deb822 ``.sources``), and stops with a message naming the fix when there is none.
No server: these run in the fast loop.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / ".ci" / "run"

# Public package mirrors' hosts: none may be written into the project's files.
_MIRROR_HOST = re.compile(r"\b(?:[\w-]+\.)*(?:debian\.org|ubuntu\.com)\b")
# Folders made from the checkout, not written in it (hidden ones too: .git, .venv*, caches).
_SKIPPED = {"build", "site", "results", "img", "__pycache__"}

DEB822 = """\
Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main

Types: deb
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
"""


def _mirror(etc: Path) -> subprocess.CompletedProcess[str]:
    """``apt_mirror`` of ``.ci/run`` run on its own, with ``etc`` as the apt folder."""
    function = re.search(r"^apt_mirror\(\) \{.*?^\}$", CI.read_text(), re.DOTALL | re.MULTILINE)
    assert function is not None, ".ci/run has no apt_mirror function"
    script = f'set -euo pipefail\ndie() {{ echo "error: $*" >&2; exit 1; }}\n{function.group()}\n'
    return subprocess.run(
        ["bash", "-c", script + 'apt_mirror "$1"', "-", str(etc)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("sources.list.d/debian.sources", DEB822),
        (
            "sources.list",
            "deb http://security.example/debian-security bookworm-security main\n"
            "deb [signed-by=/k.gpg] http://mirror.example/debian bookworm main\n",
        ),
    ],
)
def test_the_mirror_is_the_one_the_apt_sources_name(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / name).write_text(text)
    result = _mirror(tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "http://mirror.example/debian"


def test_sources_naming_no_mirror_stop_ci_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "security.sources").write_text(DEB822.split("\n\n")[0])
    result = _mirror(tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "no Debian bookworm mirror" in result.stderr and "SPARK_CDC_BASE_IMAGE" in result.stderr


def _project_files() -> list[Path]:
    """The checkout's files, without the folders made from it."""
    files = []
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = sorted(
            d for d in subfolders if d not in _SKIPPED and (d == ".ci" or not d.startswith("."))
        )
        files += [Path(folder, name) for name in sorted(names)]
    return files


def test_no_package_mirror_is_written_into_the_project() -> None:
    found = []
    for path in _project_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [
            f"{path.relative_to(ROOT)}:{number}: {match.group()}"
            for number, line in enumerate(text.splitlines(), 1)
            for match in _MIRROR_HOST.finditer(line)
        ]
    assert found == [], "mirror addresses: take them from the machine (apt sources) instead"
