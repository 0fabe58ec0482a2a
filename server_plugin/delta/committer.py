"""Commits written to a Delta log by hand: for the actions delta-rs cannot write (an add
carrying a deletion vector), following the protocol as delta-rs itself commits.

A commit is the file ``_delta_log/<version>.json``, and it is made only if no other writer
made that version first: written to a temporary name, then linked to its own without
replacing anything (``os.link`` fails when the name exists), which is what delta-rs does on
a local filesystem. Object stores need a conditional write that the Arrow filesystems lack,
so there ``can_commit`` is False and the caller takes delta-rs' own path.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from spark_cdc.server_plugin.delta.log import LOG_DIR, commit_file
from spark_cdc.server_plugin.local_paths import local_root

ENGINE_INFO = "spark-cdc-connect"


@dataclass
class PendingCommit:
    """The actions of one commit, besides its ``commitInfo``."""

    operation: str
    read_version: int
    actions: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def transaction(self, app_id: str, version: int) -> None:
        """The writer's idempotency marker (a ``txn`` action), as delta-rs writes it."""
        now = int(time.time() * 1000)
        self.actions.append({"txn": {"appId": app_id, "version": version, "lastUpdated": now}})

    def lines(self) -> bytes:
        """The commit file: ``commitInfo`` first, as Delta writes it. A table's first
        commit read no version, and says none: readers parse ``readVersion`` as an
        unsigned number (delta-rs' ``history()`` fails on -1)."""
        read = {"readVersion": self.read_version} if self.read_version >= 0 else {}
        info = {
            "timestamp": int(time.time() * 1000),
            "operation": self.operation,
            "operationParameters": {},
            **read,
            "isolationLevel": "Serializable",
            "isBlindAppend": not any("remove" in a for a in self.actions),
            "engineInfo": ENGINE_INFO,
            **self.info,
        }
        lines = [json.dumps({"commitInfo": info}, separators=(",", ":"))]
        lines += [json.dumps(a, separators=(",", ":")) for a in self.actions]
        return ("\n".join(lines) + "\n").encode()


def can_commit(uri: str) -> bool:
    return local_root(uri) is not None


def try_commit(uri: str, pending: PendingCommit) -> int | None:
    """Write ``pending`` as version ``read_version + 1``; None when another writer made
    that version first (nothing of this commit is then in the log)."""
    root = local_root(uri)
    if root is None:
        raise ValueError(f"{uri} is not on a local filesystem")
    version = pending.read_version + 1
    final = os.path.join(root, commit_file(version))
    temporary = os.path.join(root, LOG_DIR, f".{version:020d}.json.{uuid.uuid4().hex}.tmp")
    os.makedirs(os.path.dirname(temporary), exist_ok=True)
    with open(temporary, "wb") as out:
        out.write(pending.lines())
        out.flush()
        os.fsync(out.fileno())
    try:
        os.link(temporary, final)
    except FileExistsError:
        return None
    finally:
        os.unlink(temporary)
    return version


def write_file(uri: str, relative: str, data: bytes) -> None:
    """A new file of the table (a deletion vector file), written before its commit."""
    root = local_root(uri)
    if root is None:
        raise ValueError(f"{uri} is not on a local filesystem")
    path = os.path.join(root, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "xb") as out:
        out.write(data)
