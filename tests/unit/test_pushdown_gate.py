"""When a change-feed reader offers ``pushFilters``: only in PySpark's pushing planner, and
only on a server that declares its plan cache off (``pushdown.SAFE_ENV``), whose setting
our local server derives from its own settings."""

from __future__ import annotations

import pytest
from spark_cdc.server_plugin.changefeed import pushdown
from spark_cdc.server_plugin.changefeed.pushdown import SAFE_ENV, planner_pushes


def _called_from(worker_file: str, **locals_: object) -> bool:
    """``planner_pushes()`` as PySpark's planning worker ``worker_file`` would call it."""
    scope: dict[str, object] = {"planner_pushes": planner_pushes, **locals_}
    exec(compile("result = planner_pushes()", worker_file, "exec"), scope)
    return bool(scope["result"])


@pytest.mark.parametrize("declared", [None, "false", "1"])
def test_no_reader_pushes_on_a_server_that_does_not_declare_its_plan_cache_off(
    monkeypatch: pytest.MonkeyPatch, declared: str | None
) -> None:
    if declared is None:
        monkeypatch.delenv(SAFE_ENV, raising=False)
    else:
        monkeypatch.setenv(SAFE_ENV, declared)
    assert not _called_from("/x/" + pushdown._PUSHING_WORKER)
    assert not _called_from("/x/" + pushdown._PLANNING_WORKER, enable_pushdown=True)


def test_on_a_declared_server_the_planner_that_pushes_gets_the_pushing_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SAFE_ENV, "true")
    assert _called_from("/x/" + pushdown._PUSHING_WORKER)
    assert _called_from("/x/" + pushdown._PLANNING_WORKER, enable_pushdown=True)
    assert not _called_from("/x/" + pushdown._PLANNING_WORKER, enable_pushdown=False)
    assert not planner_pushes()  # outside a planning worker (a test's reader)
