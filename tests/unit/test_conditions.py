"""The one registry of error conditions: every condition the code raises is in it, every entry
is raised somewhere, names are sorted and unique, and a template takes exactly the parameters
its ``<param>`` placeholders name (``format_message`` refuses others; the tests that reach each
raise site then prove the sites pass the right ones)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from spark_cdc.server_plugin.conditions import (
    CONDITIONS,
    PLACEHOLDER,
    ConditionError,
    UnknownCondition,
    format_message,
)
from spark_cdc.server_plugin.errors import ChangelogSourceError, error, parse_error_text

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = [ROOT / "client", ROOT / "rewrite", ROOT / "server_plugin"]
REGISTRY = ROOT / "server_plugin" / "conditions.py"
_NAME = re.compile(r"^[A-Z][A-Z0-9_]*\.[A-Z][A-Z0-9_]*$")


def _string_literals() -> dict[str, list[str]]:
    """Every string literal in the package's code (docstrings too), by file."""
    found: dict[str, list[str]] = {}
    for folder in PACKAGE:
        for path in folder.rglob("*.py"):
            if path == REGISTRY:
                continue
            tree = ast.parse(path.read_text())
            strings = [
                node.value
                for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and isinstance(node.value, str)
            ]
            found[str(path.relative_to(ROOT))] = strings
    return found


def _raised_names() -> dict[str, set[str]]:
    """Condition names the code spells as whole string literals, e.g. ``error("A.B", ...)``."""
    raised: dict[str, set[str]] = {}
    for path, strings in _string_literals().items():
        for text in strings:
            if _NAME.match(text):
                raised.setdefault(text, set()).add(path)
    return raised


def test_names_are_sorted_unique_and_well_formed() -> None:
    names = list(CONDITIONS)
    assert names == sorted(names)
    assert len(set(names)) == len(names)
    assert all(_NAME.match(name) for name in names), names


def test_every_condition_the_code_raises_is_in_the_registry() -> None:
    families = {name.split(".")[0] for name in CONDITIONS}
    raised = {n: p for n, p in _raised_names().items() if n.split(".")[0] in families}
    unknown = {name: sorted(paths) for name, paths in raised.items() if name not in CONDITIONS}
    assert unknown == {}


def test_every_registry_entry_is_raised_somewhere() -> None:
    raised = _raised_names()
    assert sorted(set(CONDITIONS) - set(raised)) == []


def test_no_message_is_written_outside_the_registry() -> None:
    """No ``[FAMILY.SUB] sentence`` text of our own families is built by hand."""
    families = "|".join(sorted({name.split(".")[0] for name in CONDITIONS}))
    by_hand = re.compile(rf"\[({families})\.[A-Z_]+\] \w")
    offenders = {
        path: [s for s in strings if by_hand.search(s)]
        for path, strings in _string_literals().items()
    }
    assert {path: found for path, found in offenders.items() if found} == {}


@pytest.mark.parametrize("name", CONDITIONS)
def test_each_template_is_one_message_with_its_parameters(name: str) -> None:
    condition = CONDITIONS[name]
    values = {p: f"v_{p}" for p in condition.parameters}
    message = format_message(name, values)
    assert PLACEHOLDER.search(message) is None, message
    assert all(f"v_{p}" in message for p in condition.parameters)
    assert (
        message.rstrip()[-1] in ".?!)"
        or name.endswith(("SCHEMA_CHANGED", "MISMATCH"))
        or ("\n" in condition.message)
    ), message


def test_format_message_refuses_missing_extra_and_unknown() -> None:
    name = "INVALID_CDC_OPTION.INVALID_BOOLEAN"
    with pytest.raises(ValueError, match="takes parameters"):
        format_message(name, {"option": "x"})
    with pytest.raises(ValueError, match="takes parameters"):
        format_message(name, {"option": "x", "value": "y", "extra": "z"})
    with pytest.raises(UnknownCondition):
        format_message("INVALID_CDC_OPTION.NO_SUCH_THING", {})


def test_a_server_error_round_trips_through_its_wire_text() -> None:
    raised = error("INVALID_CDC_OPTION.INVALID_BOOLEAN", option="failOnDataLoss", value="no")
    assert isinstance(raised, ChangelogSourceError)
    wrapped = f"PythonException: Traceback ...\n  {raised}\n\tat org.apache.spark..."
    found = parse_error_text(wrapped)
    assert found is not None
    assert found.condition == "INVALID_CDC_OPTION.INVALID_BOOLEAN"
    assert found.parameters == {"option": "failOnDataLoss", "value": "no"}
    assert found.message == "Option 'failOnDataLoss' must be true or false, got 'no'."


def test_errors_without_pyspark_carry_their_condition() -> None:
    refused = ConditionError("SPARK_CDC_LOCAL_SERVER.PORT_IN_USE", port=1, host="h")
    assert refused.getCondition() == "SPARK_CDC_LOCAL_SERVER.PORT_IN_USE"
    assert refused.getMessageParameters() == {"port": "1", "host": "h"}
    assert str(refused) == (
        "[SPARK_CDC_LOCAL_SERVER.PORT_IN_USE] Port 1 on h is already in use; pick another one."
    )


def test_a_failure_of_ours_inside_a_source_is_an_internal_error_naming_where() -> None:
    """A real one: a Spark type the Arrow mapping does not know raises TypeError inside."""
    from pyspark.sql import types as T
    from spark_cdc.server_plugin.arrow_types import arrow_type
    from spark_cdc.server_plugin.errors import internal_errors

    with (
        pytest.raises(ChangelogSourceError) as caught,
        internal_errors("/tables/t", 3, "'part-0.parquet'"),
    ):
        arrow_type(T.CalendarIntervalType())
    assert caught.value.condition == "DELTA_CHANGELOG.INTERNAL_ERROR"
    assert caught.value.parameters == {
        "path": "/tables/t",
        "version": "3",
        "file": "'part-0.parquet'",
        "problem": "TypeError: no Arrow type for Spark type interval",
    }
    assert "please report it" in caught.value.message
    assert isinstance(caught.value.__cause__, TypeError)
    # Ours and the environment's pass through untouched.
    for passing in (error("INVALID_CDC_OPTION.LATEST_IN_BATCH"), FileNotFoundError("x")):
        with pytest.raises(type(passing)) as kept, internal_errors("/tables/t"):
            raise passing
        assert kept.value is passing
