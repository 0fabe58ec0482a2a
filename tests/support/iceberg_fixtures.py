"""The Iceberg tables other engines wrote: ``../shared/iceberg-fixtures`` beside the checkout
(``SPARK_CDC_ICEBERG_FIXTURES`` points elsewhere) and the conformance tables' ``iceberg/``
folder. When a variable names a root (as CI does), a missing table fails its tests; else
they are skipped."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.delta_fixtures import CONFORMANCE, CONFORMANCE_VARIABLE

VARIABLE = "SPARK_CDC_ICEBERG_FIXTURES"
ICEBERG_FIXTURES = Path(
    os.environ.get(VARIABLE) or Path(__file__).resolve().parents[3] / "shared" / "iceberg-fixtures"
)
ROOTS = {ICEBERG_FIXTURES: VARIABLE, CONFORMANCE / "iceberg": CONFORMANCE_VARIABLE}
# Every table folder (each has a location.json saying how to read it in place).
FOLDERS = sorted(p.parent for root in ROOTS for p in root.glob("*/location.json"))
EXPECTED_TABLES = 25  # 10 fixtures (README.md) and 15 conformance tables (SOURCES.md)


def each(values: list[Any]) -> list[Any]:
    """``values`` for ``pytest.mark.parametrize``; none (a clone without the tables): one
    case, skipped saying how to get them, instead of pytest's bare "empty parameter set"."""
    if values or any(os.environ.get(v) for v in ROOTS.values()):
        return values
    reason = f"no Iceberg tables under {', '.join(map(str, ROOTS))} (set {VARIABLE} and "
    reason += f"{CONFORMANCE_VARIABLE} to where they are)"
    return [pytest.param(None, id="no-tables", marks=pytest.mark.skip(reason=reason))]


def require_tables() -> None:
    """Fail when a named root is missing or short of tables; skip when none is named."""
    named = [root for root, variable in ROOTS.items() if os.environ.get(variable)]
    if len(FOLDERS) == EXPECTED_TABLES:
        return
    message = (
        f"{len(FOLDERS)} of {EXPECTED_TABLES} Iceberg tables under {', '.join(map(str, ROOTS))}"
    )
    if named:
        pytest.fail(f"{message}: the folders {', '.join(ROOTS[r] for r in named)} name")
    pytest.skip(f"{message} (set {VARIABLE} and {CONFORMANCE_VARIABLE} to where they are)")


def table_named(name: str) -> Path:
    """Table ``name``'s folder; missing, the test is skipped saying how to get the tables,
    or fails where a variable names their root (as CI does)."""
    found = next((f for f in FOLDERS if f.name == name), None)
    if found is None:
        require_tables()  # skips or fails, naming the roots
        pytest.fail(f"Iceberg table {name} is not among the {len(FOLDERS)} tables found")
    return found
