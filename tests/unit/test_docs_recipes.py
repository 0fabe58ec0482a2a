"""The recipes the docs give for reading a target run as written: the page's fenced Python
block, its example path swapped for a target ``apply_changes`` wrote, run here. A recipe no
test runs drifts from what works (the readers' table once said DuckDB was "not tested here"
while the tests read targets with it). No server, no network: these run in the fast loop.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from spark_cdc.server_plugin.sinks.apply.task import apply_batch

from tests.support.apply_model import Change
from tests.support.apply_targets import prepared, read_table, spec_for

DOCS = Path(__file__).resolve().parents[2] / "docs"
FIRST = [Change((k,), (1,), "upsert", {"a": k, "b": "x"}) for k in range(1, 5)]
LATER = [Change((1,), (2,), "upsert", {"a": 10, "b": "y"}), Change((2,), (2,), "delete")]


def recipe(page: str, heading: str) -> str:
    """The first fenced Python block under ``heading`` on ``page``."""
    text = (DOCS / page).read_text()
    section = text[text.index(f"\n{heading}\n") :]
    found = re.search(r"^```python\n(.*?)^```", section, re.DOTALL | re.MULTILINE)
    assert found is not None, f"{page}: no Python block under {heading!r}"
    return found.group(1)


@pytest.mark.parametrize("properties", [{}, {"delta.enableDeletionVectors": "true"}])
def test_duckdb_reads_a_target_offline_as_the_docs_say(
    tmp_path: Path, properties: dict[str, str]
) -> None:
    spec = spec_for(str(tmp_path), 1, table_properties=properties)
    apply_batch(spec, prepared(FIRST), 0)
    apply_batch(spec, prepared(LATER), 1)  # rewritten files, or a deletion vector
    code = recipe("living-with-a-target.md", "### DuckDB offline")
    assert "/data/orders_mirror" in code
    namespace: dict[str, object] = {}
    exec(code.replace("/data/orders_mirror", spec.target), namespace)
    rows = namespace["rows"]
    ours = [tuple(row.values()) for row in read_table(spec.target).to_pylist()]
    assert isinstance(rows, list) and len(ours) == 3
    assert sorted(rows) == sorted(ours)
