"""The Iceberg catalog ``spark-cdc apply --format iceberg`` writes through: its properties
from a file or the environment, never from the command line, where every user of the
machine reads them in ``ps`` (a catalog's properties hold its credentials).

- ``--catalog-file PATH``: ``key=value`` lines, as Spark's ``--properties-file`` takes them
  (``#`` starts a comment line);
- the environment, as pyiceberg reads it: ``PYICEBERG_CATALOG__<NAME>__<KEY>``, the key's
  ``__`` a dot and its ``_`` a dash (``PYICEBERG_CATALOG__DEFAULT__S3__SECRET_ACCESS_KEY``
  is ``s3.secret-access-key``), so a machine set up for pyiceberg needs nothing more. A
  variable overrides the file's line for the same key, as in pyiceberg.

The properties go to the server in the stream's options (the sink opens the catalog
there) and are never printed: the command says which keys it read, not their values.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from spark_cdc.cli.lifecycle import CliError

ENV_PREFIX = "PYICEBERG_CATALOG__"


def from_environment(name: str, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Catalog ``name``'s properties from ``PYICEBERG_CATALOG__<NAME>__<KEY>`` variables."""
    found = {}
    prefix = f"{ENV_PREFIX}{name}__".lower()
    for variable, value in environ.items():
        if variable.lower().startswith(prefix):
            key = variable.lower()[len(prefix) :].replace("__", ".").replace("_", "-")
            found[key] = value
    return found


def from_file(path: Path) -> dict[str, str]:
    """``key=value`` lines; a line that is neither, nor blank or a comment, is refused with
    its number (never its text, which may hold a secret)."""
    try:
        text = path.read_text()
    except OSError as error:
        raise CliError(
            "SPARK_CDC_CLI.CATALOG_FILE_UNREADABLE", file=path, reason=error.strerror
        ) from None
    found = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, equals, value = stripped.partition("=")
        if not equals or not key.strip():
            raise CliError("SPARK_CDC_CLI.CATALOG_FILE_INVALID", file=path, line=number)
        found[key.strip()] = value.strip()
    return found


def catalog_properties(
    name: str, file: Path | None, environ: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """The file's properties, the environment's over them, and the catalog's ``name`` (a SQL
    catalog files its tables under it) unless they give one; none at all is refused."""
    given = {
        **(from_file(file) if file is not None else {}),
        **from_environment(name, environ),
    }
    if not given:
        raise CliError(
            "SPARK_CDC_CLI.NO_CATALOG",
            name=name,
            variable=f"{ENV_PREFIX}{name.upper()}__URI",
        )
    return {"name": name, **given}
