"""``spark-cdc apply``'s line per micro-batch, from progress as Spark reports it (the JSON of
a change-feed source's offsets as our sources write them) and the batch's recorded
outcome."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql.streaming.listener import StreamingQueryProgress
from spark_cdc import AppliedChanges
from spark_cdc.cli.apply_report import batch_line
from spark_cdc.server_plugin.changefeed.offsets import Offset

NOW_MS = 300_000  # the time the lines are made: 300 s after the epoch the offsets count from


def _offset(version: int, previous_ms: int) -> str:
    return json.dumps(Offset("t-1", version, False, previous_ms).to_json())


def _progress(
    batch: int, start: str | None, end: str, latest: str | None, rows: int
) -> StreamingQueryProgress:
    source: dict[str, Any] = {
        "description": "PythonMicroBatchStream",
        "startOffset": start,
        "endOffset": end,
        "latestOffset": latest,
        "numInputRows": rows,
        "inputRowsPerSecond": 0.0,
        "processedRowsPerSecond": 0.0,
        "metrics": {},
    }
    return StreamingQueryProgress.fromJson(
        {
            "id": "00000000-0000-0000-0000-000000000001",
            "runId": "00000000-0000-0000-0000-000000000002",
            "name": None,
            "timestamp": "2026-11-28T10:00:00.000Z",
            "batchId": batch,
            "batchDuration": 10,
            "durationMs": {},
            "eventTime": {},
            "stateOperators": [],
            "sources": [source],
            "sink": {"description": "PythonTable", "numOutputRows": rows, "metrics": {}},
            "numInputRows": rows,
            "inputRowsPerSecond": 0.0,
            "processedRowsPerSecond": 0.0,
            "observedMetrics": {},
        }
    )


@pytest.mark.parametrize(
    ("start", "end", "latest", "applied", "line"),
    [
        (
            None,
            _offset(3, 1_000),
            _offset(3, 1_000),
            AppliedChanges(5, 4, 4),
            "batch 0 (up to version 2): 5 changes, 4 keys and 4 rows written; lag 0 versions "
            "(caught up), newest applied commit 299 s ago",
        ),
        (
            _offset(3, 1_000),
            _offset(6, 61_000),
            _offset(9, 181_000),
            AppliedChanges(1200, 1180, 1),
            "batch 0 (versions 3-5): 1,200 changes, 1,180 keys and 1 row written; "
            "lag 3 versions, newest applied commit 239 s ago",
        ),
        (
            _offset(3, 1_000),
            _offset(4, 2_000),
            None,  # a source that reports no latest offset
            None,
            "batch 0 (version 3): 7 changes applied; lag unknown versions (the source reports "
            "no newest version), newest applied commit 298 s ago",
        ),
    ],
)
def test_a_batch_line_says_what_was_covered_written_and_how_far_behind(
    start: str | None, end: str, latest: str | None, applied: AppliedChanges | None, line: str
) -> None:
    assert batch_line(_progress(0, start, end, latest, 7), applied, NOW_MS) == line


def test_a_batch_without_changes_says_so() -> None:
    progress = _progress(4, _offset(5, 9_000), _offset(5, 9_000), _offset(6, 12_000), 0)
    assert batch_line(progress, None, NOW_MS) == (
        "batch 4: no changes; lag 1 version, newest applied commit 291 s ago"
    )
