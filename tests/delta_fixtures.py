"""The Delta tables written by Delta Spark and Databricks (``../shared/delta-fixtures``,
beside the checkout; ``SPARK_CDC_DELTA_FIXTURES`` points elsewhere). Tests read a copy in
their own folder, which is also the one a containerized server sees."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

FIXTURES = Path(
    os.environ.get("SPARK_CDC_DELTA_FIXTURES")
    or Path(__file__).resolve().parents[2] / "shared" / "delta-fixtures"
)


def copy_fixture(tmp_path: Path, name: str) -> str:
    """A copy of fixture ``name`` under ``tmp_path``; the test is skipped, saying where the
    fixtures were looked for, when they are not there."""
    if not (FIXTURES / name).is_dir():
        pytest.skip(f"Delta fixture {name} not found under {FIXTURES} (SPARK_CDC_DELTA_FIXTURES)")
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    return str(target)
