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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import NamedTuple

from spark_cdc.server_plugin.conditions import format_message
from spark_cdc.server_plugin.vocabulary import SERVER_CONDITIONS

PARAMETERS_PREFIX = "Parameters: "
_FAMILIES = "|".join(SERVER_CONDITIONS)
_PARAMETERS = re.escape(PARAMETERS_PREFIX)
_OURS = re.compile(rf"\[((?:{_FAMILIES})\.[A-Z0-9_]+)\] ([^\n]*)(?:\n{_PARAMETERS}(\{{[^\n]*\}}))?")


class ErrorText(NamedTuple):
    """An error of ours found in a server's text: what the client rebuilds."""

    condition: str
    message: str
    parameters: dict[str, str]


def error_text(condition: str, message: str, parameters: Mapping[str, str]) -> str:
    """The wire form; ``message`` is the condition's template, filled."""
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
    """An error of ours raised inside the server: a condition of the registry
    (``spark_cdc.server_plugin.conditions``) and its parameters, in the wire form above."""

    def __init__(self, condition: str, /, **parameters: object) -> None:
        self.condition = condition
        # One line each: the wire form is a line of text and a line of JSON.
        self.parameters = {k: str(v).replace("\n", " ") for k, v in parameters.items()}
        self.message = format_message(condition, self.parameters)
        super().__init__(error_text(condition, self.message, self.parameters))

    def __reduce__(self) -> tuple[object, ...]:  # pickled back from Spark's Python workers
        return (_rebuilt, (self.condition, self.parameters))


def _rebuilt(condition: str, parameters: dict[str, str]) -> ChangelogSourceError:
    return ChangelogSourceError(condition, **parameters)


def error(name: str, **parameters: object) -> ChangelogSourceError:
    """The one way the server side raises: ``raise error("FAMILY.SUB", param=value)``."""
    return ChangelogSourceError(name, **parameters)


# Not bugs of ours: the environment's (I/O, memory, a package that will not import) or a stop.
_NOT_OURS = (ChangelogSourceError, OSError, MemoryError, ImportError)


_INTERNAL = {
    "DELTA_CHANGELOG": "DELTA_CHANGELOG.INTERNAL_ERROR",
    "ICEBERG_CHANGELOG": "ICEBERG_CHANGELOG.INTERNAL_ERROR",
    "POSTGRES_CHANGELOG": "POSTGRES_CHANGELOG.INTERNAL_ERROR",
}


@contextmanager
def internal_errors(
    path: str, version: object = "unknown", file: object = "none", family: str = "DELTA_CHANGELOG"
) -> Iterator[None]:
    """Inside a source, any other failure (a ``TypeError``, an ``AssertionError``...) is a
    bug of ours: raised as the source's ``<family>.INTERNAL_ERROR`` naming the table, the
    version and the data file when known, so that the user can report it, not as a bare
    traceback."""
    try:
        yield
    except _NOT_OURS:
        raise
    except Exception as problem:
        raise error(
            _INTERNAL[family],
            path=path,
            version=version,
            file=file,
            problem=f"{type(problem).__name__}: {problem}",
        ) from problem
