"""``iceberg_changelog`` options: the common ones as the Delta source reads them, its own
(branch, snapshot ids) and the families, refused by name when wrong."""

from __future__ import annotations

import pytest
from spark_cdc.server_plugin.delta.options import parse_delta_options
from spark_cdc.server_plugin.errors import ChangelogSourceError
from spark_cdc.server_plugin.iceberg.options import parse_iceberg_options


def _refusal(raw: dict[str, str], streaming: bool = False) -> ChangelogSourceError:
    with pytest.raises(ChangelogSourceError) as caught:
        parse_iceberg_options(raw, streaming)
    return caught.value


def test_own_options_and_storage_properties_are_read() -> None:
    options = parse_iceberg_options(
        {
            "path": "/t",
            "Branch": "audit",
            "startingSnapshotId": "5704367174060004588",
            "endingsnapshotid": "-3",
            "storage.s3.region": "eu-west-1",
            "maxFilesPerTrigger": "7",
        }
    )
    assert (options.branch, options.starting_snapshot, options.ending_snapshot) == (
        "audit",
        5704367174060004588,
        -3,
    )
    assert options.common.storage == {"s3.region": "eu-west-1"}
    assert options.common.max_files == 7
    assert parse_iceberg_options({"path": "/t"}).branch == "main"


@pytest.mark.parametrize(
    ("raw", "streaming", "condition"),
    [
        ({"startingSnapshotId": "x1"}, False, "INVALID_CDC_OPTION.INVALID_SNAPSHOT_ID"),
        (
            {"startingSnapshotId": "1", "startingVersion": "2"},
            False,
            "INVALID_CDC_OPTION.SNAPSHOT_ID_WITH_OTHER_BOUNDS",
        ),
        (
            {"startingVersion": "1", "endingVersion": "2", "endingSnapshotId": "3"},
            False,
            "INVALID_CDC_OPTION.SNAPSHOT_ID_WITH_OTHER_BOUNDS",
        ),
        ({"endingSnapshotId": "3"}, True, "INVALID_CDC_OPTION.ENDING_BOUND_IN_STREAM"),
        ({"snapshotId": "3"}, False, "INVALID_CDC_OPTION.UNKNOWN_OPTION"),
        ({"deduplicationMode": "netChanges"}, False, "INVALID_CDC_OPTION.NET_CHANGES_IN_SOURCE"),
    ],
)
def test_wrong_options_are_refused_by_name(
    raw: dict[str, str], streaming: bool, condition: str
) -> None:
    refusal = _refusal({"path": "/t", **raw}, streaming)
    assert refusal.condition == condition
    if condition.endswith("UNKNOWN_OPTION"):
        assert "iceberg_changelog" in refusal.message
        assert "storage.<KEY> for pyiceberg table and FileIO properties" in refusal.message
    if condition.endswith("NET_CHANGES_IN_SOURCE"):
        assert refusal.parameters["source"] == "iceberg_changelog"


def test_update_detection_is_accepted_without_a_row_id() -> None:
    """The source finds one itself (the table's identifier fields), or refuses the read
    when the table has none; the Delta source, which cannot, refuses it here."""
    raw = {"path": "/t", "computeUpdates": "true"}
    common = parse_iceberg_options(raw).common
    assert (common.row_id, common.drop_carryovers, common.compute_updates) == (None, True, True)
    with pytest.raises(ChangelogSourceError, match="MISSING_ROW_ID"):
        parse_delta_options(raw)
