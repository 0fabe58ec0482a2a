"""Stream offsets: where a changelog source's stream is in a table's history (every source's
offsets have this shape; ``family`` names the source's conditions).

Micro-batches hold whole commits, so a position is always "the next commit to read is
``version``" (``index`` -1: none of its files read; kept for the shape of Delta's own
offsets). Until the first micro-batch pins it, the initial offset names no version:
"the snapshot at the version the stream starts from" or "after the latest commit". The
end offset of that first batch records the version, so re-running the batch after a
restart reads the same snapshot even if the table moved on meanwhile.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from spark_cdc.server_plugin.errors import error

FORMAT_VERSION = 1
DELTA, ICEBERG = "DELTA_CHANGELOG", "ICEBERG_CHANGELOG"  # the sources' condition families
_INVALID = {DELTA: "DELTA_CHANGELOG.INVALID_OFFSET", ICEBERG: "ICEBERG_CHANGELOG.INVALID_OFFSET"}
_OTHER_TABLE = {
    DELTA: "DELTA_CHANGELOG.OFFSET_FROM_ANOTHER_TABLE",
    ICEBERG: "ICEBERG_CHANGELOG.OFFSET_FROM_ANOTHER_TABLE",
}
_BACKWARDS = {
    DELTA: "DELTA_CHANGELOG.OFFSET_MOVED_BACKWARDS",
    ICEBERG: "ICEBERG_CHANGELOG.OFFSET_MOVED_BACKWARDS",
}


@dataclass(frozen=True)
class Offset:
    table_id: str
    version: int | None  # the next commit to read; None until the first batch pins it
    initial_snapshot: bool  # the table's snapshot is to be read first (version None only)
    previous_ms: int | None  # monotonic timestamp of commit version-1: continues the chain
    # Iceberg: the last snapshot served, to find it again (a rollback or an expiry moves the
    # branch away from it). Only written when set: Delta's offsets keep their shape.
    snapshot_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "sourceVersion": FORMAT_VERSION,
            "tableId": self.table_id,
            "version": self.version,
            "index": -1,
            "isInitialSnapshot": self.initial_snapshot,
            "previousCommitTimestamp": self.previous_ms,
        } | ({} if self.snapshot_id is None else {"snapshotId": self.snapshot_id})

    @classmethod
    def from_json(cls, value: dict[str, Any], table_id: str, family: str = DELTA) -> Offset:
        if not isinstance(value, dict) or value.get("sourceVersion") != FORMAT_VERSION:
            raise error(
                _INVALID[family],
                offset=json.dumps(value, sort_keys=True),
                sourceVersion=FORMAT_VERSION,
            )
        if value.get("tableId") != table_id:
            raise error(
                _OTHER_TABLE[family],
                checkpointTableId=value.get("tableId"),
                tableId=table_id,
            )
        return cls(
            table_id,
            value.get("version"),
            bool(value.get("isInitialSnapshot")),
            value.get("previousCommitTimestamp"),
            value.get("snapshotId"),
        )


def check_forward(start: Offset, end: Offset, family: str = DELTA) -> None:
    if start.version is not None and (end.version is None or end.version < start.version):
        raise error(
            _BACKWARDS[family],
            startVersion=start.version,
            endVersion=end.version,
        )
