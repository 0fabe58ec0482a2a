"""The suite's own scheduling: the modules ``tests/conftest.py`` sends to the workers first
exist, so a module renamed or removed does not silently lose its place at the front."""

from __future__ import annotations

from tests.conftest import _LONGEST_FIRST, ROOT


def test_the_longest_modules_named_exist() -> None:
    missing = [name for name in _LONGEST_FIRST if not (ROOT / "tests" / name).is_file()]
    assert missing == []
    assert len(set(_LONGEST_FIRST)) == len(_LONGEST_FIRST)
