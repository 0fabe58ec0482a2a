"""Stream offsets: where a ``delta_changelog`` stream is in a table's history.

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


@dataclass(frozen=True)
class Offset:
    table_id: str
    version: int | None  # the next commit to read; None until the first batch pins it
    initial_snapshot: bool  # the table's snapshot is to be read first (version None only)
    previous_ms: int | None  # monotonic timestamp of commit version-1: continues the chain

    def to_json(self) -> dict[str, Any]:
        return {
            "sourceVersion": FORMAT_VERSION,
            "tableId": self.table_id,
            "version": self.version,
            "index": -1,
            "isInitialSnapshot": self.initial_snapshot,
            "previousCommitTimestamp": self.previous_ms,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any], table_id: str) -> Offset:
        if not isinstance(value, dict) or value.get("sourceVersion") != FORMAT_VERSION:
            raise error(
                "DELTA_CHANGELOG.INVALID_OFFSET",
                offset=json.dumps(value, sort_keys=True),
                sourceVersion=FORMAT_VERSION,
            )
        if value.get("tableId") != table_id:
            raise error(
                "DELTA_CHANGELOG.OFFSET_FROM_ANOTHER_TABLE",
                checkpointTableId=value.get("tableId"),
                tableId=table_id,
            )
        return cls(
            table_id,
            value.get("version"),
            bool(value.get("isInitialSnapshot")),
            value.get("previousCommitTimestamp"),
        )


def check_forward(start: Offset, end: Offset) -> None:
    if start.version is not None and (end.version is None or end.version < start.version):
        raise error(
            "DELTA_CHANGELOG.OFFSET_MOVED_BACKWARDS",
            startVersion=start.version,
            endVersion=end.version,
        )
