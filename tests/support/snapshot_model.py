"""The reference model of a snapshot diff: two snapshots as dicts of key to row, compared
as Spark compares values (NULL-safely; NaN equals NaN; -0.0 equals 0.0)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def same(a: Any, b: Any) -> bool:
    """Spark's ``<=>`` on two values of one type, nested values included."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def model_diff(
    before: Sequence[dict[str, Any]],
    after: Sequence[dict[str, Any]],
    keys: Sequence[str],
    compared: Sequence[str],
    compute_updates: bool,
    version: int,
) -> list[dict[str, Any]]:
    """The change rows that turn ``before`` into ``after`` (rows of distinct, non-NULL
    keys): after's columns, ``_change_type`` and ``_commit_version``."""

    def by_key(rows: Sequence[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
        return {tuple(r[k] for k in keys): r for r in rows}

    old, new = by_key(before), by_key(after)
    pre, post = ("update_preimage", "update_postimage") if compute_updates else ("delete", "insert")
    out: list[dict[str, Any]] = []
    for key in old.keys() | new.keys():
        if key not in new:
            out.append({**old[key], "_change_type": "delete", "_commit_version": version})
        elif key not in old:
            out.append({**new[key], "_change_type": "insert", "_commit_version": version})
        elif not all(same(old[key][c], new[key][c]) for c in compared):
            out.append({**old[key], "_change_type": pre, "_commit_version": version})
            out.append({**new[key], "_change_type": post, "_commit_version": version})
    return out


def comparable(value: Any) -> Any:
    """A value in a form that sorts and compares by ``==`` (NaN as text, rows as dicts)."""
    if hasattr(value, "asDict"):
        value = value.asDict(recursive=True)
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return tuple(sorted((k, comparable(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(comparable(v) for v in value)
    return value


def as_bag(rows: Sequence[Any], columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """Rows (dicts or Spark's Rows) as sorted tuples of ``columns``."""
    tuples = [tuple(comparable(r[c]) for c in columns) for r in rows]
    return sorted(tuples, key=repr)
