"""A Delta table's transaction log, read commit by commit.

delta-rs gives snapshots (it knows checkpoints and log compaction) but not the actions of
one commit, which is what a change feed is made of; those come from the commit's own JSON
file. Both go through one Arrow filesystem, so a table path or any URI delta-rs can open
(``s3://``, ``abfss://``, ``gs://``, ``file://``) works the same way.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

from server_plugin.errors import source_error

LOG_DIR = "_delta_log"

# Reader features whose tables this source reads correctly. Deletion vectors are checked
# per file (a table may enable them and have none); anything else is refused by name.
READABLE_FEATURES = frozenset(
    {"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck", "typeWidening", "deletionVectors"}
)


@dataclass(frozen=True)
class FileAction:
    path: str
    size: int
    partition_values: dict[str, str | None]
    data_change: bool
    has_deletion_vector: bool

    @classmethod
    def from_json(cls, action: dict[str, Any]) -> FileAction:
        return cls(
            path=action["path"],
            size=int(action.get("size") or 0),
            partition_values=dict(action.get("partitionValues") or {}),
            data_change=bool(action.get("dataChange", True)),
            has_deletion_vector=action.get("deletionVector") is not None,
        )


@dataclass(frozen=True)
class Commit:
    """One commit's actions. ``timestamp_ms`` is as recorded, not yet made monotonic."""

    version: int
    timestamp_ms: int
    adds: tuple[FileAction, ...]
    removes: tuple[FileAction, ...]
    cdcs: tuple[FileAction, ...]
    metadata: dict[str, Any] | None
    protocol: dict[str, Any] | None


def commit_file(version: int) -> str:
    return f"{LOG_DIR}/{version:020d}.json"


class DeltaLog:
    """Opens a table's files; holds nothing that cannot be rebuilt after pickling."""

    def __init__(self, uri: str, storage_options: dict[str, str] | None = None) -> None:
        self.uri = uri
        self.storage_options = dict(storage_options or {})
        self._fs: pafs.FileSystem | None = None
        self._root = ""

    def __getstate__(self) -> dict[str, Any]:
        return {"uri": self.uri, "storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["uri"], state["storage_options"])  # type: ignore[misc]

    @property
    def fs(self) -> pafs.FileSystem:
        if self._fs is None:
            local = _local_path(self.uri)
            if local is not None:
                self._fs, self._root = pafs.LocalFileSystem(), local.rstrip("/")
            else:
                from deltalake.fs import DeltaStorageHandler

                handler = DeltaStorageHandler(self.uri, self.storage_options or None)
                self._fs, self._root = pafs.PyFileSystem(handler), ""
        return self._fs

    def location(self, path: str) -> str:
        """Where a path from the log lives on ``fs``: log paths are URI-encoded and
        relative to the table root unless absolute."""
        parsed = urlparse(path)
        if parsed.scheme == "file":
            return unquote(parsed.path)
        if parsed.scheme:
            return path
        relative = unquote(path)
        self.fs  # noqa: B018 - resolves the root
        return f"{self._root}/{relative}" if self._root else relative

    def open(self, path: str) -> Any:
        return self.fs.open_input_file(self.location(path))

    # -- the table as delta-rs sees it -------------------------------------------------

    def table(self, version: int | None = None) -> Any:
        from deltalake import DeltaTable

        try:
            return DeltaTable(self.uri, version=version, storage_options=self.storage_options)
        except Exception as error:
            if version is None or not DeltaTable.is_deltatable(self.uri, self.storage_options):
                raise source_error(
                    "NOT_A_DELTA_TABLE",
                    f"'{self.uri}' is not a Delta table the server can read ({error}). "
                    "Pass the table's root directory (the one holding _delta_log).",
                ) from error
            raise source_error(
                "DATA_LOSS",
                f"Version {version} of '{self.uri}' can no longer be loaded ({error}); its log "
                "was probably cleaned up. Start from a later version.",
            ) from error

    # -- commits -----------------------------------------------------------------------

    def commit(self, version: int) -> Commit | None:
        """The commit's actions, or None when its file does not exist."""
        path = self.location(commit_file(version))
        try:
            with self.fs.open_input_stream(path) as stream:
                text = stream.read().decode("utf-8")
        except FileNotFoundError:
            return None
        adds: list[FileAction] = []
        removes: list[FileAction] = []
        cdcs: list[FileAction] = []
        info: dict[str, Any] = {}
        metadata = protocol = None
        for line in text.splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action:
                adds.append(FileAction.from_json(action["add"]))
            elif "remove" in action:
                removes.append(FileAction.from_json(action["remove"]))
            elif "cdc" in action:
                cdcs.append(FileAction.from_json(action["cdc"]))
            elif "commitInfo" in action:
                info = action["commitInfo"] or {}
            elif "metaData" in action:
                metadata = action["metaData"]
            elif "protocol" in action:
                protocol = action["protocol"]
        stamp = info.get("inCommitTimestamp", info.get("timestamp"))
        if stamp is None:  # very old writers: the commit file's modification time
            mtime = self.fs.get_file_info(path).mtime
            stamp = int(mtime.timestamp() * 1000) if mtime else 0
        return Commit(
            version, int(stamp), tuple(adds), tuple(removes), tuple(cdcs), metadata, protocol
        )

    def commit_versions(self) -> list[int]:
        """Versions whose commit file exists, ascending (one listing of the log)."""
        selector = pafs.FileSelector(self.location(LOG_DIR), allow_not_found=True)
        versions = []
        for info in self.fs.get_file_info(selector):
            name = info.path.rsplit("/", 1)[-1]
            stem, _, ext = name.partition(".")
            if ext == "json" and len(stem) == 20 and stem.isdigit():
                versions.append(int(stem))
        return sorted(versions)


def _local_path(uri: str) -> str | None:
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return unquote(parsed.path)
    if not parsed.scheme or (len(parsed.scheme) == 1 and os.name == "nt"):
        return os.path.abspath(uri)
    return None


def check_readable_protocol(protocol: dict[str, Any] | None, metadata: dict[str, Any]) -> None:
    """Refuse, naming the feature, a table whose rows this source would read wrongly."""
    mapping = (metadata.get("configuration") or {}).get("delta.columnMapping.mode", "none")
    if mapping != "none":
        raise unsupported_feature(
            "columnMapping",
            f" (mode '{mapping}': data files use physical column names)",
        )
    features = set((protocol or {}).get("readerFeatures") or ())
    for feature in sorted(features - READABLE_FEATURES):
        raise unsupported_feature(feature, "")


def unsupported_feature(feature: str, detail: str) -> Exception:
    return source_error(
        "UNSUPPORTED_TABLE_FEATURE",
        f"The table uses the Delta table feature '{feature}'{detail}, which this changelog "
        "source cannot read correctly; it refuses rather than return wrong rows. Read its "
        "change data feed with Delta Lake on the server instead.",
    )
