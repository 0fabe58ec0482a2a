"""Spark's AUTO CDC cases (its Scd1ForeachBatchHandlerSuite and Scd2ForeachBatchHandlerSuite),
ported as batches of events and the target they make, for every target format's tests."""

from __future__ import annotations

SCHEMA = "id long, value string, seq long, is_delete boolean"
Event = tuple[int, str | None, int, bool]


def U(key: int, value: str, seq: int) -> Event:
    return (key, value, seq, False)


def D(key: int, seq: int) -> Event:
    return (key, None, seq, True)


# Scd2ForeachBatchHandlerSuite's cases: batches of events -> the target's versions.
SCD2_CASES = {
    "late upsert closed by an earlier tombstone": (
        [[D(1, 20)], [U(1, "x", 10)]],
        [(1, "x", 10, 20)],
    ),
    "first upsert": ([[U(1, "a", 10)]], [(1, "a", 10, None)]),
    "two upserts in a batch": (
        [[U(1, "a", 10), U(1, "b", 20)]],
        [(1, "a", 10, 20), (1, "b", 20, None)],
    ),
    "upsert then delete": ([[U(1, "a", 10), D(1, 20)]], [(1, "a", 10, 20)]),
    "gap for a deletion": (
        [[U(1, "a", 10), U(1, "b", 20), D(1, 30), U(1, "c", 40)]],
        [(1, "a", 10, 20), (1, "b", 20, 30), (1, "c", 40, None)],
    ),
    "no change coalesces": ([[U(1, "a", 10), U(1, "a", 20)]], [(1, "a", 10, None)]),
    "delete of an unknown key": ([[D(1, 5)]], []),
    "update closes current": (
        [[U(1, "a", 10)], [U(1, "b", 20)]],
        [(1, "a", 10, 20), (1, "b", 20, None)],
    ),
    "delete closes current": ([[U(1, "a", 10)], [D(1, 20)]], [(1, "a", 10, 20)]),
    "late older upsert": ([[U(1, "a", 10)], [U(1, "b", 5)]], [(1, "b", 5, 10), (1, "a", 10, None)]),
    "late upsert inside a version": (
        [[U(1, "a", 10), U(1, "c", 20)], [U(1, "b", 15)]],
        [(1, "a", 10, 15), (1, "b", 15, 20), (1, "c", 20, None)],
    ),
    "late delete inside a version": (
        [[U(1, "a", 10), U(1, "b", 30)], [D(1, 20)]],
        [(1, "a", 10, 20), (1, "b", 30, None)],
    ),
    "two late upserts in one batch": (
        [[U(1, "a", 1), U(1, "b", 5), U(1, "c", 10), U(1, "d", 20)], [U(1, "x", 7), U(1, "y", 15)]],
        [
            (1, "a", 1, 5),
            (1, "b", 5, 7),
            (1, "x", 7, 10),
            (1, "c", 10, 15),
            (1, "y", 15, 20),
            (1, "d", 20, None),
        ],
    ),
    "upsert after a held tombstone": ([[D(1, 20)], [U(1, "x", 30)]], [(1, "x", 30, None)]),
    "batch by batch": (
        [[U(1, "a", 10)], [U(1, "a", 20)], [U(1, "b", 30)]],
        [(1, "a", 10, 30), (1, "b", 30, None)],
    ),
    "late change splits a run": (
        [
            [U(1, "Alice", 5), U(1, "Alice", 10), U(1, "Alice", 15)],
            [U(1, "Charlie", 20)],
            [U(1, "Bob", 12)],
        ],
        [(1, "Alice", 5, 12), (1, "Bob", 12, 15), (1, "Alice", 15, 20), (1, "Charlie", 20, None)],
    ),
    "identical duplicates in a batch": ([[U(1, "a", 10), U(1, "a", 10)]], [(1, "a", 10, None)]),
    "identical duplicate in a later batch": (
        [[U(1, "a", 10)], [U(1, "a", 10)]],
        [(1, "a", 10, None)],
    ),
    "mixed keys": (
        [[U(1, "a", 10), U(2, "p", 10)], [U(1, "b", 20), D(2, 20), U(3, "z", 20)]],
        [(1, "a", 10, 20), (1, "b", 20, None), (2, "p", 10, 20), (3, "z", 20, None)],
    ),
    "several keys in a batch": (
        [[U(1, "a", 10), U(2, "p", 10), U(1, "b", 20), U(2, "p", 20)]],
        [(1, "a", 10, 20), (1, "b", 20, None), (2, "p", 10, None)],
    ),
}


# Scd1ForeachBatchHandlerSuite's cases: batches of events -> the target's rows.
SCD1_CASES = {
    "stale upsert after a tombstone": (
        [[D(1, 10)], [U(1, "stale", 5), U(2, "fresh", 20)]],
        [(2, "fresh")],
    ),
    "delete removes the row": ([[U(1, "old", 10)], [D(1, 20)]], []),
    "newest upsert of a batch wins": (
        [[U(1, "old", 10)], [U(1, "older", 15), U(1, "newer", 20)]],
        [(1, "newer")],
    ),
    "six batches": (
        [
            [U(1, "alice", 1), U(1, "bob", 3)],
            [U(1, "carol", 2)],
            [U(1, "dave", 4)],
            [D(1, 2)],
            [D(1, 5)],
            [U(1, "ghost", 4)],
        ],
        [],
    ),
    "later upsert replaces": ([[U(1, "alice", 1)], [U(1, "bob", 2)]], [(1, "bob")]),
    "tombstone of an unknown key": ([[D(99, 1)], [U(99, "late", 0)]], []),
}
