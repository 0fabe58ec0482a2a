"""Errors raised inside the server, and the one text form they cross the wire in.

A Python data source cannot raise PySpark's error classes across the worker boundary: the
client receives the exception's text, inside the server's traceback. So every message is
``[CONDITION.SUB] one sentence``, followed, when it has any, by one line of parameters as
JSON. ``parse_error_text`` finds both again in whatever text the server wraps them in; the
client (``spark_cdc.compat.server_errors``) rebuilds the exception from them, and a client without
this package still reads the condition and the sentence.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

from spark_cdc.server_plugin.vocabulary import (
    DELTA_CHANGELOG,
    INVALID_CDC_OPTION,
    SERVER_CONDITIONS,
)

PARAMETERS_PREFIX = "Parameters: "
_FAMILIES = "|".join(SERVER_CONDITIONS)
_PARAMETERS = re.escape(PARAMETERS_PREFIX)
_OURS = re.compile(rf"\[((?:{_FAMILIES})\.[A-Z0-9_]+)\] ([^\n]*)(?:\n{_PARAMETERS}(\{{[^\n]*\}}))?")


class ErrorText(NamedTuple):
    condition: str
    message: str
    parameters: dict[str, str]


def error_text(condition: str, message: str, parameters: dict[str, str]) -> str:
    text = f"[{condition}] {message}"
    if parameters:
        text += "\n" + PARAMETERS_PREFIX + json.dumps(parameters, sort_keys=True)
    return text


def parse_error_text(text: str) -> ErrorText | None:
    """The first of our errors in ``text`` (a server message, traceback and all), if any."""
    match = _OURS.search(text)
    if match is None:
        return None
    condition, message, raw = match.groups()
    try:
        parameters = {str(k): str(v) for k, v in json.loads(raw).items()} if raw else {}
    except ValueError:
        parameters = {}
    return ErrorText(condition, message.strip(), parameters)


class ChangelogSourceError(Exception):
    def __init__(self, condition: str, message: str, **parameters: object) -> None:
        self.condition = condition
        self.parameters = {name: str(value) for name, value in parameters.items()}
        super().__init__(error_text(condition, message, self.parameters))


def source_error(kind: str, message: str, **parameters: object) -> ChangelogSourceError:
    return ChangelogSourceError(f"{DELTA_CHANGELOG}.{kind}", message, **parameters)


def option_error(kind: str, message: str, **parameters: object) -> ChangelogSourceError:
    return ChangelogSourceError(f"{INVALID_CDC_OPTION}.{kind}", message, **parameters)


def corrupt_commit(version: int, table: str, file: str, problem: str) -> ChangelogSourceError:
    """Not data loss: the file is there but unreadable, so skipping it (failOnDataLoss=false)
    would silently drop changes nobody can know; the fix is the file, not the query."""
    return source_error(
        "CORRUPT_COMMIT",
        f"Commit {version} of '{table}' cannot be read: its log file '{file}' is damaged: "
        f"{problem}. A commit file is written once and never changes, so the table's "
        "transaction log is corrupt and failOnDataLoss=false does not skip it. Restore the "
        "file from a backup or replica of the table, then rerun the query.",
        version=version,
        path=table,
        file=file,
    )
