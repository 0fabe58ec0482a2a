"""A plain-Python reference of what ``apply_changes`` makes of a whole feed, change by change,
written from the rules in the README (not from the server's code), which the model tests
compare the server's targets with.

A change is a ``Change``: its key, its sequence (a tuple, compared in order), what it is
(``"upsert"``, ``"delete"``, ``"truncate"``) and the values it sets.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any


class Conflict(Exception):
    """Two different changes of one key at one sequence."""


@dataclass(frozen=True)
class Change:
    key: tuple[Any, ...]
    sequence: tuple[Any, ...]
    kind: str
    values: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def same_as(self, other: Change) -> bool:
        if self.kind != other.kind:
            return False
        return self.kind != "upsert" or self.values == other.values


@dataclass
class Version:
    values: dict[str, Any]
    start: tuple[Any, ...]
    end: tuple[Any, ...] | None = None


def key_histories(
    changes: list[Change],
    tracked: list[str],
    ignore_null_updates: bool = False,
    changelog_pairs: bool = False,
    current_only: bool = False,
) -> dict[tuple[Any, ...], list[Version]]:
    """Every key's versions, type 2's way (type 1 keeps each key's last, when current).

    Two different changes of a key at one sequence are a ``Conflict`` when their order
    decides the result: always for a history; for ``current_only`` (type 1) when the
    key's current row differs between the orders (every order is tried)."""
    truncates = [c.sequence for c in changes if c.kind == "truncate"]
    newest_truncate = max(truncates) if truncates else None
    slots: dict[tuple[Any, ...], dict[tuple[Any, ...], list[Change]]] = defaultdict(dict)
    for change in changes:
        if change.kind == "truncate":
            continue
        if newest_truncate is not None and change.sequence <= newest_truncate:
            continue  # a truncate deletes every key at its sequence
        slot = slots[change.key].setdefault(change.sequence, [])
        if not any(change.same_as(seen) for seen in slot):
            slot.append(change)
    histories: dict[tuple[Any, ...], list[Version]] = {}
    for key, by_sequence in slots.items():
        ordered = []
        for sequence in sorted(by_sequence):
            slot = by_sequence[sequence]
            if changelog_pairs and any(c.kind == "upsert" for c in slot):
                slot = [c for c in slot if c.kind == "upsert"]  # the two halves of an update
            if len(slot) > 1 and not current_only:
                raise Conflict(key, sequence)
            ordered.append(slot)
        outcomes = [
            _fold([c for slot in orders for c in slot], tracked, ignore_null_updates)
            for orders in itertools.product(*(itertools.permutations(s) for s in ordered))
        ]
        if len({_current(v) for v in outcomes}) > 1:
            raise Conflict(key, next(s[0].sequence for s in ordered if len(s) > 1))
        histories[key] = outcomes[0]
    return histories


def _current(versions: list[Version]) -> Any:
    last = versions[-1] if versions and versions[-1].end is None else None
    return None if last is None else tuple(sorted(last.values.items(), key=str))


def _fold(ordered: list[Change], tracked: list[str], ignore_null_updates: bool) -> list[Version]:
    versions: list[Version] = []
    current: Version | None = None
    for change in ordered:
        if change.kind == "delete":
            if current is not None:
                current.end = change.sequence
                current = None
            continue
        values = dict(change.values)
        if ignore_null_updates and current is not None:
            for name, value in values.items():
                if value is None:
                    values[name] = current.values[name]  # the value the key had just before
        if current is not None and all(current.values[c] == values[c] for c in tracked):
            current.values = values  # no tracked change: the version is updated in place
            continue
        if current is not None:
            current.end = change.sequence
        current = Version(values, change.sequence)
        versions.append(current)
    return versions


def scd1(changes: list[Change], **rules: Any) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Type 1: each key's row after its last change, for keys whose last change is an upsert."""
    histories = key_histories(changes, tracked=[], current_only=True, **rules)
    return {
        key: versions[-1].values
        for key, versions in histories.items()
        if versions and versions[-1].end is None
    }


def scd2(
    changes: list[Change], tracked: list[str], **rules: Any
) -> dict[tuple[Any, ...], list[Version]]:
    """Type 2: each key's versions, oldest first."""
    return {k: v for k, v in key_histories(changes, tracked, **rules).items() if v}
