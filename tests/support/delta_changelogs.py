"""Delta tables whose raw change feed is exactly a given list of commits, written by hand.

Version 0 adds one file per later commit holding that commit's deleted rows; from version 1
on, each commit removes its file of deleted rows and adds a file of its inserted rows (what
a copy-on-write rewrite looks like in the log), or, when it holds rows already labelled
``update_preimage``/``update_postimage``, writes them all to one change data file. Read from
``startingVersion=1``, ``delta_changelog`` serves the commits' rows as given, so random
change feeds (duplicates, carry-overs, NULLs, ``-0.0``, NaN) reach the source.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tests.support.delta_tables import write_commit
from tests.support.feeds import commit_time

DATA_SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("d", pa.float64())])
SCHEMA_DDL = (
    "id bigint, v string, d double, _change_type string, _commit_version bigint, "
    "_commit_timestamp timestamp"
)
_SCHEMA_STRING = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "v", "type": "string", "nullable": True, "metadata": {}},
            {"name": "d", "type": "double", "nullable": True, "metadata": {}},
        ],
    }
)
NATIVE = ("update_preimage", "update_postimage")


def write_changelog(path: str, commits: Sequence[Sequence[dict[str, Any]]]) -> None:
    """Commits 1..n of a new table at ``path``; row dicts hold id, v, d, _change_type."""
    root = Path(path)
    (root / "_delta_log").mkdir(parents=True)
    deleted_files: dict[int, dict[str, Any]] = {}
    for version, rows in enumerate(commits, start=1):
        deletes = [r for r in rows if r["_change_type"] == "delete"]
        if deletes and not _native(rows):
            deleted_files[version] = _data_file(root, deletes)
    first = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 4}},
        {
            "metaData": {
                "id": str(uuid.uuid4()),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": _SCHEMA_STRING,
                "partitionColumns": [],
                "configuration": {},
                "createdTime": _millis(0),
            }
        },
        *({"add": add} for add in deleted_files.values()),
    ]
    _commit(root, 0, first)
    for version, rows in enumerate(commits, start=1):
        actions: list[dict[str, Any]] = []
        if _native(rows):
            actions.append({"cdc": _data_file(root, rows, with_change_type=True, cdc=True)})
        else:
            if version in deleted_files:
                actions.append({"remove": _remove(deleted_files[version])})
            inserts = [r for r in rows if r["_change_type"] == "insert"]
            if inserts:
                actions.append({"add": _data_file(root, inserts)})
        _commit(root, version, actions)


def _native(rows: Sequence[dict[str, Any]]) -> bool:
    return any(r["_change_type"] in NATIVE for r in rows)


def _data_file(
    root: Path, rows: Sequence[dict[str, Any]], with_change_type: bool = False, cdc: bool = False
) -> dict[str, Any]:
    schema = (
        DATA_SCHEMA.append(pa.field("_change_type", pa.string()))
        if with_change_type
        else DATA_SCHEMA
    )
    table = pa.Table.from_pylist([{f.name: r[f.name] for f in schema} for r in rows], schema)
    name = f"{'_change_data/' if cdc else ''}part-{uuid.uuid4()}.parquet"
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, root / name)
    action = {
        "path": name,
        "partitionValues": {},
        "size": (root / name).stat().st_size,
        "dataChange": not cdc,
    }
    if not cdc:
        action["modificationTime"] = _millis(0)
    return action


def _remove(add: dict[str, Any]) -> dict[str, Any]:
    return {
        "path": add["path"],
        "deletionTimestamp": _millis(0),
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": {},
        "size": add["size"],
    }


def _commit(root: Path, version: int, actions: list[dict[str, Any]]) -> None:
    info = {"commitInfo": {"timestamp": _millis(version), "operation": "WRITE"}}
    lines = [json.dumps(a) for a in [info, *actions]]
    write_commit(root / "_delta_log" / f"{version:020d}.json", lines)


def _millis(version: int) -> int:
    return int(commit_time(version).timestamp() * 1000)
