"""A user's clone has no ``../shared`` beside it: every test that reads the tables other
engines wrote must skip there, saying how to get them, never error or fail. (CI names the
folders, and there a missing table fails: tests/support/delta_fixtures.py,
iceberg_fixtures.py.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # copies the checkout and runs pytest in it: ~20 s

FAST = "not server and not slow"  # ./dev test --fast's selection
ROOT = Path(__file__).resolve().parents[2]
FIXTURE_VARIABLES = (
    "SPARK_CDC_DELTA_FIXTURES",
    "SPARK_CDC_ICEBERG_FIXTURES",
    "SPARK_CDC_CONFORMANCE",
)


def _fixture_tests(root: Path) -> list[str]:
    """The fast loop's test files that read the fixtures or the conformance tables."""
    found = []
    for path in sorted((root / "tests" / "unit").glob("test_*.py")):
        if re.search(r"tests\.support\.(delta|iceberg)_fixtures", path.read_text()):
            found.append(str(path.relative_to(root)))
    return found


def test_the_fast_loop_passes_in_a_clone_without_the_shared_tables(tmp_path: Path) -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "tests", "pyproject.toml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    clone = tmp_path / "clone"  # tmp_path/shared does not exist: nothing beside the clone
    for name in tracked:
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    files = _fixture_tests(clone)
    assert len(files) >= 5, files  # the walk finds the Delta and Iceberg fixture tests
    environment = {k: v for k, v in os.environ.items() if k not in FIXTURE_VARIABLES}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-m", FAST, *files],
        cwd=clone,
        env=environment,
        capture_output=True,
        text=True,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "skipped" in summary and not re.search(r"\b(failed|error)", summary), summary
    # Each skip of a table says where to get them.
    reasons = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert reasons and all("SPARK_CDC_" in r for r in reasons), "\n".join(reasons)
