"""The Delta tables written by Delta Spark and Databricks (``../shared/delta-fixtures``,
beside the checkout; ``SPARK_CDC_DELTA_FIXTURES`` points elsewhere). Tests read a copy in
their own folder, which is also the one a containerized server sees."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

_SHARED = Path(__file__).resolve().parents[3] / "shared"
NAMED = os.environ.get("SPARK_CDC_DELTA_FIXTURES")
FIXTURES = Path(NAMED or _SHARED / "delta-fixtures")
# The conformance tables (``../shared/conformance``: Delta's, delta-rs', kernel's and other
# projects' test tables, listed in its SOURCES.md files).
CONFORMANCE_VARIABLE = "SPARK_CDC_CONFORMANCE"
CONFORMANCE = Path(os.environ.get(CONFORMANCE_VARIABLE) or _SHARED / "conformance")


def fixture_dir(name: str, root: Path = FIXTURES) -> Path:
    """Fixture ``name``'s folder under ``root``. Missing, the test is skipped, saying where
    it looked; when the variable naming the root is set (as CI does), it fails: a fixture
    that should be there and is not must not pass as a skip."""
    variable = CONFORMANCE_VARIABLE if root == CONFORMANCE else "SPARK_CDC_DELTA_FIXTURES"
    path = root / name
    if not path.is_dir():
        message = f"Delta fixture {name} not found under {root}"
        if os.environ.get(variable):
            pytest.fail(f"{message}, the folder {variable} names.")
        pytest.skip(f"{message} (set {variable} to where they are)")
    return path


def copy_fixture(tmp_path: Path, name: str, root: Path = FIXTURES) -> str:
    """A copy of fixture ``name`` under ``tmp_path`` (see ``fixture_dir``)."""
    target = tmp_path / Path(name).name
    shutil.copytree(fixture_dir(name, root), target)
    return str(target)
