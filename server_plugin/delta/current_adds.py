"""The add action that makes a file part of a snapshot, whole: with its deletion vector
descriptor, which delta-rs' snapshot API does not give (it gives the bitmaps only).

A commit that marks more rows of a file deleted removes the file's current (path,
deletion vector) pair and adds the file with its new one; a remove that named no deletion
vector, or another one, would leave the old pair in the snapshot and the file counted twice.
So the current pair is found as Delta's log replay finds it: the newest commit after the
last checkpoint that adds the path, else the checkpoint (classic, multi-part, or v2 with
its sidecars).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

import pyarrow.fs as pafs
import pyarrow.parquet as pq
from spark_cdc.server_plugin.delta.log import LOG_DIR, DeltaLog, commit_file

SIDECARS = f"{LOG_DIR}/_sidecars"


def current_adds(log: DeltaLog, version: int, paths: set[str]) -> dict[str, dict[str, Any]]:
    """The add action of each of ``paths`` (decoded, relative to the table) in the
    snapshot at ``version``; a path the snapshot does not hold is absent."""
    wanted, found = set(paths), {}
    checkpoint = _last_checkpoint(log, version)
    for at in range(version, checkpoint, -1):
        if not wanted:
            break
        with log.fs.open_input_stream(log.location(commit_file(at))) as stream:
            lines = stream.read().decode("utf-8").splitlines()
        removed = set()
        for line in lines:
            if '"add"' not in line and '"remove"' not in line:
                continue
            action = json.loads(line)
            for kind in ("add", "remove"):
                entry = action.get(kind)
                path = unquote(entry["path"]) if entry else None
                if path in wanted:
                    if kind == "add":
                        found[path] = entry
                    else:
                        removed.add(path)
        wanted -= removed | set(found)
    if wanted and checkpoint >= 0:
        found.update(_from_checkpoint(log, checkpoint, wanted))
    return found


def _last_checkpoint(log: DeltaLog, version: int) -> int:
    """The newest checkpoint at or before ``version`` (-1: none)."""
    done = log._log_versions(lambda rest: rest.startswith("checkpoint."))
    return max((v for v in done if v <= version), default=-1)


def _from_checkpoint(log: DeltaLog, version: int, wanted: set[str]) -> dict[str, dict[str, Any]]:
    prefix = f"{version:020d}.checkpoint."
    selector = pafs.FileSelector(log.location(LOG_DIR))
    files = [i.path for i in log.fs.get_file_info(selector) if i.base_name.startswith(prefix)]
    found: dict[str, dict[str, Any]] = {}
    for path in files:
        if path.endswith(".json"):  # a v2 checkpoint in JSON: its actions, then sidecars
            with log.fs.open_input_stream(path) as stream:
                actions = [json.loads(line) for line in stream.read().decode().splitlines()]
            adds = [a["add"] for a in actions if a.get("add")]
            sidecars = [a["sidecar"]["path"] for a in actions if a.get("sidecar")]
        else:
            adds, sidecars = _parquet_actions(log, path)
        found.update(_matching(adds, wanted))
        for sidecar in sidecars:
            more, _ = _parquet_actions(log, log.location(f"{SIDECARS}/{unquote(sidecar)}"))
            found.update(_matching(more, wanted))
    return found


def _parquet_actions(log: DeltaLog, path: str) -> tuple[list[dict[str, Any]], list[str]]:
    with log.fs.open_input_file(path) as source:
        parquet = pq.ParquetFile(source)
        names = {"add", "sidecar"} & set(parquet.schema_arrow.names)
        table = parquet.read(columns=sorted(names))
    adds = table.column("add").drop_null().to_pylist() if "add" in names else []
    sidecars = []
    if "sidecar" in names:
        sidecars = [s["path"] for s in table.column("sidecar").drop_null().to_pylist()]
    return [_as_json(a) for a in adds], sidecars


def _as_json(add: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's add (Parquet: maps as key-value lists, absent fields as NULL) as the
    JSON a commit holds."""
    out = {k: v for k, v in add.items() if v is not None and not k.endswith("_parsed")}
    for name in ("partitionValues", "tags"):
        if isinstance(out.get(name), list):
            out[name] = dict(out[name])
    dv = out.get("deletionVector")
    if dv is not None:
        out["deletionVector"] = {k: v for k, v in dv.items() if v is not None}
    return out


def _matching(adds: list[dict[str, Any]], wanted: set[str]) -> dict[str, dict[str, Any]]:
    return {unquote(a["path"]): a for a in adds if unquote(a["path"]) in wanted}
