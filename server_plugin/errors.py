"""Errors the Delta changelog source raises inside the server.

A Python data source cannot raise PySpark's error classes across the worker boundary: the
client receives the exception's text. So every message leads with its condition in Spark's
``[CONDITION.SUB] ...`` form, which survives the trip and can be matched on the client.
"""

from __future__ import annotations


class ChangelogSourceError(Exception):
    def __init__(self, condition: str, message: str) -> None:
        super().__init__(f"[{condition}] {message}")
        self.condition = condition


def source_error(kind: str, message: str) -> ChangelogSourceError:
    return ChangelogSourceError(f"DELTA_CHANGELOG.{kind}", message)


def option_error(kind: str, message: str) -> ChangelogSourceError:
    return ChangelogSourceError(f"INVALID_CDC_OPTION.{kind}", message)


def corrupt_commit(version: int, table: str, file: str, problem: str) -> ChangelogSourceError:
    """Not data loss: the file is there but unreadable, so skipping it (failOnDataLoss=false)
    would silently drop changes nobody can know; the fix is the file, not the query."""
    return source_error(
        "CORRUPT_COMMIT",
        f"Commit {version} of '{table}' cannot be read: its log file '{file}' is damaged: "
        f"{problem}. A commit file is written once and never changes, so the table's "
        "transaction log is corrupt and failOnDataLoss=false does not skip it. Restore the "
        "file from a backup or replica of the table, then rerun the query.",
    )
