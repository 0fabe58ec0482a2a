"""Comparing errors as PySpark's own tests do (``pyspark.testing.utils.check_error``): the
condition and the parameters exactly, not substrings of the message."""

from __future__ import annotations

from typing import Any


def assert_condition(error: Any, condition: str, parameters: dict[str, str]) -> None:
    """``error`` (a PySpark error, or one of ours with ``getCondition()``) has exactly
    ``condition`` and ``parameters``, and its text leads with ``[condition] ``."""
    assert error.getCondition() == condition, str(error)[:2000]
    assert error.getMessageParameters() == parameters, str(error)[:2000]
    assert str(error).startswith(f"[{condition}] "), str(error)[:2000]
