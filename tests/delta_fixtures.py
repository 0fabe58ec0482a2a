"""The Delta tables written by Delta Spark and Databricks (``../shared/delta-fixtures``,
beside the checkout; ``SPARK_CDC_DELTA_FIXTURES`` points elsewhere). Tests read a copy in
their own folder, which is also the one a containerized server sees."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

NAMED = os.environ.get("SPARK_CDC_DELTA_FIXTURES")
FIXTURES = Path(NAMED or Path(__file__).resolve().parents[2] / "shared" / "delta-fixtures")


def fixture_dir(name: str) -> Path:
    """Fixture ``name``'s folder. Missing, the test is skipped, saying where it looked;
    when ``SPARK_CDC_DELTA_FIXTURES`` names the folder (as CI does), it fails: a fixture
    that should be there and is not must not pass as a skip."""
    path = FIXTURES / name
    if not path.is_dir():
        message = f"Delta fixture {name} not found under {FIXTURES}"
        if NAMED:
            pytest.fail(f"{message}, the folder SPARK_CDC_DELTA_FIXTURES names.")
        pytest.skip(f"{message} (set SPARK_CDC_DELTA_FIXTURES to where they are)")
    return path


def copy_fixture(tmp_path: Path, name: str) -> str:
    """A copy of fixture ``name`` under ``tmp_path`` (see ``fixture_dir``)."""
    target = tmp_path / name
    shutil.copytree(fixture_dir(name), target)
    return str(target)
