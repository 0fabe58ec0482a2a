"""DuckDB as another reader of the tables the tests write. Its extensions come from their
PyPI wheels (``duckdb-extension-iceberg``, ``-avro``, ``-delta``: the test extra pins them
to DuckDB's version), loaded from the installed files: ``INSTALL`` would download them
from DuckDB's own site, which CI machines need not reach."""

from __future__ import annotations

import functools
from importlib import import_module
from pathlib import Path
from typing import Any

import pyarrow as pa


@functools.cache
def connection(*extensions: str) -> Any:
    """A DuckDB connection with ``extensions`` loaded from their wheels, made once per
    process: loading the Iceberg extension costs a quarter of a second, which a model test
    paid on every example (most of its time in the fast loop). Each query stands alone."""
    import duckdb

    found = duckdb.connect()
    for name in extensions:
        package = Path(import_module(f"duckdb_extension_{name}").__path__[0])
        (binary,) = package.glob(f"extensions/v{duckdb.__version__}/{name}.duckdb_extension")
        found.execute(f"LOAD '{binary}'")
    return found


def iceberg_rows(metadata_location: str) -> pa.Table:
    """The rows of the Iceberg table whose metadata file is ``metadata_location``, as
    DuckDB's ``iceberg_scan`` reads them (position deletes applied)."""
    path = metadata_location.removeprefix("file://")
    return (
        connection("avro", "iceberg")
        .execute(f"SELECT * FROM iceberg_scan('{path}')")
        .to_arrow_table()
    )


def delta_rows(path: str) -> pa.Table:
    """The rows of the Delta table at ``path``, as DuckDB's ``delta_scan`` (Delta Kernel)
    reads them (deletion vectors applied)."""
    return connection("delta").execute(f"SELECT * FROM delta_scan('{path}')").to_arrow_table()
