"""Data files written into a table's folder before a commit names them: how the tasks
write the rows they resolved, in parallel, so that only the files' add actions travel to
the driver, whose commit names them with the batch's marker (Spark's own writers split
the work alike: the tasks write files, the driver commits them).

``delta.data_files`` writes the rows straight into the table's folder where it writes
their columns and partitions (none, or one integer column: the state's bucket); else
delta-rs writes them (their Parquet, partition folders and statistics, as for any append)
as a staging table inside the table's folder, and the files are moved from it into the
table. Files are staged only on a local filesystem (``committer.can_commit``); elsewhere
the rows travel and the driver writes them. A staged file that no commit names
(the batch was refused, or found applied already) is deleted by whoever knows of it; one a
failed task left is an orphan, which VACUUM removes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.delta import committer, data_files
from spark_cdc.server_plugin.delta.log import LOG_DIR
from spark_cdc.server_plugin.local_paths import local_root
from spark_cdc.server_plugin.sinks.apply.delta.tables import (
    add_actions,
    commit_properties,
    refusing_races,
    table_schema,
)
from spark_cdc.server_plugin.sinks.apply.engine.spec import ApplySpec


def stage(
    root: str, rows: pa.Table, partition_by: list[str], configuration: dict[str, str]
) -> list[dict[str, Any]]:
    """``rows`` (none: an empty table) written by delta-rs as a staging table in the
    folder ``root`` (local), its data files moved into it: the staging table's first
    commit's actions, the add actions naming the moved files."""
    from deltalake import write_deltalake

    staging = os.path.join(root, f"_spark_cdc_staging_{uuid.uuid4().hex}")
    try:
        write_deltalake(
            staging, rows, partition_by=partition_by or None, configuration=configuration or None
        )
        with open(os.path.join(staging, LOG_DIR, f"{0:020d}.json"), "rb") as commit:
            actions = [json.loads(line) for line in commit if line.strip()]
        for action in actions:
            if "add" in action:
                relative = unquote(action["add"]["path"])
                os.makedirs(os.path.dirname(os.path.join(root, relative)), exist_ok=True)
                os.rename(os.path.join(staging, relative), os.path.join(root, relative))
        return actions
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def staged_files(
    uri: str,
    rows: pa.Table,
    partition_by: list[str] | None = None,
    configuration: dict[str, str] | None = None,
    keys: tuple[str, ...] = (),
) -> tuple[dict[str, Any], ...]:
    """``rows`` staged into the table at ``uri`` (local): the add actions of their files,
    written by ``data_files`` where it writes their columns and partitions (``keys``:
    the table's key columns, which get no dictionary), else by delta-rs."""
    root = local_root(uri)
    assert root is not None
    partition_by = partition_by or []
    data = pa.schema([f for f in rows.schema if f.name not in partition_by])
    if _plain_partitions(rows, partition_by) and data_files.writes(data, configuration or {}):
        return _written(root, rows, partition_by, data_files.new_file_dictionary(data, keys))
    actions = stage(root, rows, partition_by, configuration or {})
    return tuple(a["add"] for a in actions if "add" in a)


def _plain_partitions(rows: pa.Table, partition_by: list[str]) -> bool:
    """Whether ``rows``' partitions are folders any writer names alike: none, or one
    integer column without NULLs (the state's bucket)."""
    if not partition_by:
        return True
    column = rows.column(partition_by[0])
    return len(partition_by) == 1 and pa.types.is_integer(column.type) and not column.null_count


def _written(
    root: str, rows: pa.Table, partition_by: list[str], coded: set[str]
) -> tuple[dict[str, Any], ...]:
    """``rows`` written by ``data_files`` into their partitions' folders, a file of at
    most ``FILE_ROWS`` rows each."""
    if partition_by:
        name = partition_by[0]
        column = rows.column(name)
        found = pc.unique(column).to_pylist()
        whole = len(found) == 1 and not column.null_count  # a task's state: its own bucket
        parts = [
            (f"{name}={v}", {name: str(v)}, rows if whole else rows.filter(pc.equal(column, v)))
            for v in found
        ]
    else:
        parts = [("", {}, rows)]
    return tuple(
        data_files.write(
            root, folder, part.drop_columns(partition_by).slice(start, size), values, coded
        )
        for folder, values, part in parts
        for start, size in [
            (s, data_files.FILE_ROWS) for s in range(0, part.num_rows, data_files.FILE_ROWS)
        ]
    )


def stages(uri: str) -> bool:
    """Whether files can be staged into the table at ``uri``."""
    return committer.can_commit(uri)


def unheld(uri: str, adds: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
    """The staged files the table at ``uri`` does not hold (none when it cannot be read:
    orphans at worst, never a committed file deleted)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    if not adds:
        return adds
    try:
        if not DeltaTable.is_deltatable(uri):
            return adds
        paths = add_actions(DeltaTable(uri), flatten=False).column("path").to_pylist()
        holding = {unquote(path) for path in paths}
    except (OSError, DeltaError):
        return ()
    return tuple(add for add in adds if unquote(add["path"]) not in holding)


def discard(uri: str, adds: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> None:
    """The staged files deleted, and the folders they leave empty up to the table's own
    (a new table's: its tasks made it), so that a refused batch leaves no folder where
    there was none."""
    found = local_root(uri)
    if found is None:
        return
    root = os.path.normpath(found)
    for add in adds:
        path = os.path.normpath(os.path.join(root, unquote(add["path"])))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        folder = os.path.dirname(path)
        while folder.startswith(root):  # never above the table's folder
            try:
                os.rmdir(folder)  # only an empty one
            except OSError:
                break
            folder = os.path.dirname(folder)


def append_staged(
    table: Any,
    spec: ApplySpec,
    version: int,
    adds: tuple[dict[str, Any], ...],
    outcome: str | None = None,
) -> None:
    """One commit appending the staged files ``adds`` (of an unpartitioned table), with
    the batch's marker and ``outcome``: delta-rs' own commit, which another writer's
    commit in between does not break (an append conflicts with none)."""
    from deltalake.transaction import AddAction

    actions = [
        AddAction(
            unquote(add["path"]),
            int(add["size"]),
            add.get("partitionValues") or {},
            int(add["modificationTime"]),
            True,
            add.get("stats") or "",
        )
        for add in adds
    ]
    with refusing_races(table.table_uri):
        properties = commit_properties(spec, version, outcome)
        table.create_write_transaction(
            actions, "append", table_schema(table), commit_properties=properties
        )
