"""Iceberg tables the tests and benchmarks write with pyiceberg: a SQL catalog of their own
in a folder, and copy-on-write rewrites in one snapshot (pyiceberg's own overwrite and
upsert commit a delete and an append as two snapshots)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa


def catalog_properties(folder: Path, name: str = "tests") -> dict[str, str]:
    return {
        "name": name,
        "type": "sql",
        "uri": f"sqlite:///{folder}/catalog.db",
        "warehouse": f"file://{folder}/warehouse",
    }


def sql_catalog(folder: Path, name: str = "tests") -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    properties = catalog_properties(folder, name)
    return SqlCatalog(name, uri=properties["uri"], warehouse=properties["warehouse"])


def table_folder(table: Any) -> str:
    return str(table.location()).removeprefix("file://")


def rewrite(table: Any, rows: pa.Table) -> None:
    """One copy-on-write snapshot: every live data file out, ``rows`` in."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    live = [task.file for task in table.scan().plan_files()]
    with (
        table.transaction() as transaction,
        transaction.update_snapshot().overwrite() as snapshot,
    ):
        for data_file in live:
            snapshot.delete_data_file(data_file)
        if not rows.num_rows:  # pyiceberg divides by the row count
            return
        for data_file in _dataframe_to_data_files(
            transaction.table_metadata, rows, table.io, snapshot.commit_uuid
        ):
            snapshot.append_data_file(data_file)
