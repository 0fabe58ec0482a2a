"""A Delta table's transaction log, read commit by commit.

delta-rs gives snapshots (it knows checkpoints and log compaction) but not the actions of
one commit, which is what a change feed is made of; those come from the commit's own JSON
file. Both go through one Arrow filesystem, so a table path or any URI delta-rs can open
(``s3://``, ``abfss://``, ``gs://``, ``file://``) works the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs
from spark_cdc.server_plugin.delta.deletion_vectors import DeletionVector
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.local_paths import local_root

LOG_DIR = "_delta_log"

# Reader features whose tables this source reads correctly. Deletion vectors are checked
# per file (a table may enable them and have none); anything else is refused by name.
READABLE_FEATURES = frozenset(
    {
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "typeWidening",
        "deletionVectors",
        "columnMapping",
        "variantType",  # read as Spark's variant: Spark 4.0+, every server this runs on
        "variantType-preview",
    }
)


@dataclass(frozen=True)
class FileAction:
    path: str
    size: int
    partition_values: dict[str, str | None]
    data_change: bool
    deletion_vector: DeletionVector | None

    @classmethod
    def from_json(cls, action: dict[str, Any]) -> FileAction:
        return cls(
            path=action["path"],
            size=int(action.get("size") or 0),
            partition_values=dict(action.get("partitionValues") or {}),
            data_change=bool(action.get("dataChange", True)),
            deletion_vector=DeletionVector.from_json(action.get("deletionVector")),
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
            local = local_root(self.uri)
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
        except Exception as problem:
            self.check_commits_replayed_for(version)
            reason = _first_line(problem)
            try:
                is_table = DeltaTable.is_deltatable(self.uri, self.storage_options)
            except Exception:
                is_table = None  # unknown: the reason says more than a guess would
            if is_table is False:
                raise error("DELTA_CHANGELOG.NOT_A_DELTA_TABLE", path=self.uri) from problem
            if version is None or is_table is None:
                raise error(
                    "DELTA_CHANGELOG.UNREADABLE_TABLE", path=self.uri, reason=reason
                ) from problem
            raise error(
                "DELTA_CHANGELOG.DATA_LOSS_SNAPSHOT", version=version, path=self.uri, reason=reason
            ) from problem

    # -- commits -----------------------------------------------------------------------

    def commit(self, version: int) -> Commit | None:
        """The commit's actions, or None when its file does not exist."""
        path = self.location(commit_file(version))
        try:
            with self.fs.open_input_stream(path) as stream:
                data = stream.read()
        except FileNotFoundError:
            return None
        try:
            return parse_commit(version, data, lambda: self._modified_ms(path))
        except ValueError as problem:
            raise error(
                "DELTA_CHANGELOG.CORRUPT_COMMIT",
                version=version,
                path=self.uri,
                file=f"{self.uri.rstrip('/')}/{commit_file(version)}",
                problem=problem,
            ) from problem

    def _modified_ms(self, path: str) -> int:
        mtime = self.fs.get_file_info(path).mtime
        return int(mtime.timestamp() * 1000) if mtime else 0

    def commit_versions(self) -> list[int]:
        """Versions whose commit file exists, ascending (one listing of the log)."""
        return self._log_versions(lambda rest: rest == "json")

    def _log_versions(self, kind: Callable[[str], bool]) -> list[int]:
        """Versions of the log files whose name after ``<version>.`` passes ``kind``."""
        selector = pafs.FileSelector(self.location(LOG_DIR), allow_not_found=True)
        versions = []
        for info in self.fs.get_file_info(selector):
            name = info.path.rsplit("/", 1)[-1]
            stem, _, rest = name.partition(".")
            if len(stem) == 20 and stem.isdigit() and kind(rest):
                versions.append(int(stem))
        return sorted(versions)

    def check_commits_replayed_for(self, version: int | None) -> None:
        """Raise CORRUPT_COMMIT for a damaged commit file that loading ``version`` (None:
        the latest) replays, i.e. one after the last checkpoint at or before it.

        Only called once delta-rs has failed to load the table: its error then says "Json
        error" without naming the file, and a damaged commit is not "not a Delta table"."""
        limit = float("inf") if version is None else version
        checkpoints = self._log_versions(lambda rest: rest.startswith("checkpoint."))
        after = max((v for v in checkpoints if v <= limit), default=-1)
        for candidate in self.commit_versions():
            if after < candidate <= limit:
                self.commit(candidate)


def parse_commit(version: int, data: bytes, file_time_ms: Callable[[], int]) -> Commit:
    """A commit file's actions. Unknown action types are skipped, as Delta's readers do;
    anything else that is not a well-formed action (a torn write, a non-JSON line, an
    empty file: a commit holds at least one action) raises ValueError saying where.
    ``file_time_ms`` is asked only when the commit records no time (very old writers)."""
    adds: list[FileAction] = []
    removes: list[FileAction] = []
    cdcs: list[FileAction] = []
    stamp: int | None = None
    metadata = protocol = None
    lines = data.decode("utf-8").splitlines()
    if not any(line.strip() for line in lines):
        raise ValueError("it is empty, but a commit holds at least one action")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            action = json.loads(line)
            if not isinstance(action, dict):
                raise ValueError(f"expected a JSON object, got {line.strip()[:40]!r}")
            if "add" in action:
                adds.append(FileAction.from_json(action["add"]))
            elif "remove" in action:
                removes.append(FileAction.from_json(action["remove"]))
            elif "cdc" in action:
                cdcs.append(FileAction.from_json(action["cdc"]))
            elif "commitInfo" in action:
                info = action["commitInfo"] or {}
                recorded = info.get("inCommitTimestamp", info.get("timestamp"))
                stamp = None if recorded is None else int(recorded)
            elif "metaData" in action:
                metadata = action["metaData"]
                json.loads(metadata["schemaString"])
            elif "protocol" in action:
                protocol = action["protocol"]
        except (ValueError, KeyError, TypeError, AttributeError) as problem:
            raise ValueError(f"line {number} {_what_is_wrong(problem)}") from problem
    return Commit(
        version,
        file_time_ms() if stamp is None else stamp,
        tuple(adds),
        tuple(removes),
        tuple(cdcs),
        metadata,
        protocol,
    )


def _what_is_wrong(error: Exception) -> str:
    if isinstance(error, json.JSONDecodeError):
        reason = error.msg.removesuffix(" at").removesuffix(" starting")
        return f"is not JSON ({reason} at column {error.colno})"
    if isinstance(error, KeyError):
        return f"is not a valid action (missing field {error})"
    return f"is not a valid action ({error})"


def _first_line(error: Exception) -> str:
    """delta-rs errors may carry a multi-line native backtrace; its first line says it."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def check_readable_protocol(protocol: dict[str, Any] | None, metadata: dict[str, Any]) -> None:
    """Refuse, naming the feature, a table whose rows this source would read wrongly."""
    mapping = str((metadata.get("configuration") or {}).get("delta.columnMapping.mode", "none"))
    if mapping.lower() not in ("none", "name", "id"):
        raise unsupported_feature(f"columnMapping mode {mapping}")
    features = set((protocol or {}).get("readerFeatures") or ())
    for feature in sorted(features - READABLE_FEATURES):
        raise unsupported_feature(feature)


def unsupported_feature(feature: str) -> Exception:
    return error("DELTA_CHANGELOG.UNSUPPORTED_TABLE_FEATURE", feature=feature)
