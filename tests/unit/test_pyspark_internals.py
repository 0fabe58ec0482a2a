"""Every private attribute of PySpark that ``spark_cdc.rewrite.pyspark_internals`` relies on
exists, with the kind it needs, in the installed PySpark. No server: run it in each Spark
version's virtualenv (``.venv-4.0/bin/python -m pytest tests/unit/test_pyspark_internals.py``)
to learn before any server test which accessor a new PySpark broke."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest
from spark_cdc.rewrite import pyspark_internals
from spark_cdc.rewrite.pyspark_internals import INTERNALS, Internal

KINDS = {"function", "property", "attribute", "class attribute", "module attribute"}


def _owner(internal: Internal) -> object:
    module_name, _, class_name = internal.owner.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, class_name) if class_name else module


@pytest.mark.parametrize("internal", INTERNALS, ids=lambda i: f"{i.owner}.{i.name}")
def test_pyspark_has_the_internal(internal: Internal) -> None:
    assert internal.kind in KINDS
    owner = _owner(internal)
    if internal.kind == "function":
        assert callable(getattr(owner, internal.name, None)), internal
    elif internal.kind == "property":
        assert isinstance(inspect.getattr_static(owner, internal.name, None), property), internal
    elif internal.kind in ("class attribute", "module attribute"):
        assert internal.name in vars(owner), internal
    else:  # set on each instance: the class's own code (or a base's) assigns it
        assert inspect.isclass(owner)
        assigned = re.compile(rf"\bself\.{re.escape(internal.name)}\b\s*(:[^=]*)?=[^=]")
        sources = [
            inspect.getsource(c) for c in owner.__mro__ if c.__module__.startswith("pyspark")
        ]
        assert any(assigned.search(s) for s in sources), internal


def test_every_private_access_is_listed() -> None:
    """Each ``x._name`` the accessors touch is one of ``INTERNALS`` (the list stays whole)."""
    source = Path(pyspark_internals.__file__).read_text()
    code = source.split("INTERNALS: tuple", 1)[1].split("\n)\n", 1)[1]
    touched = set(re.findall(r"\._([a-zA-Z]\w*)", code)) | set(
        re.findall(r'"_([a-zA-Z]\w*)"', code)
    )
    listed = {i.name.lstrip("_") for i in INTERNALS}
    own = {"plan"}  # ``df._plan`` is listed; ``_plan_id`` also
    assert touched - listed - own == set()


def test_the_module_loads_no_connect_client() -> None:
    """The patches call it while PySpark's Connect client is still loading."""
    source = Path(pyspark_internals.__file__).read_text()
    top_level = source.split("if TYPE_CHECKING:", 1)[0]
    assert "pyspark.sql.connect" not in top_level.split('"""', 2)[2]


def test_the_column_functions_setting_round_trips() -> None:
    from pyspark.errors import utils

    before = utils._enable_debugging_cache
    try:
        utils._enable_debugging_cache = None
        assert pyspark_internals.debugging_setting_unread()
        pyspark_internals.settle_debugging_setting(False)
        assert not pyspark_internals.debugging_setting_unread()
        assert utils._enable_debugging_cache is False
    finally:
        utils._enable_debugging_cache = before


def test_error_fields_are_what_getcondition_reads() -> None:
    from pyspark.errors import AnalysisException

    error = AnalysisException(message="old", errorClass=None, messageParameters={})
    pyspark_internals.set_error_fields(error, "[X.Y] new", "X.Y", {"a": "b"})
    assert error.getCondition() == "X.Y"
    assert error.getMessageParameters() == {"a": "b"}
    assert pyspark_internals.error_message(error) == "[X.Y] new"
