"""The delta_changelog source's options, offsets and commit times, without a server."""

from __future__ import annotations

import pytest
from spark_cdc.server_plugin.changefeed.commit_timestamps import next_timestamp, parse_timestamp_ms
from spark_cdc.server_plugin.changefeed.offsets import Offset, check_forward
from spark_cdc.server_plugin.delta.options import parse_delta_options as parse_source_options
from spark_cdc.server_plugin.errors import ChangelogSourceError


def test_trigger_limits_follow_delta() -> None:
    assert parse_source_options({"path": "/t"}).file_limit == 1000
    only_bytes = parse_source_options({"path": "/t", "maxBytesPerTrigger": "64m"})
    assert (only_bytes.file_limit, only_bytes.max_bytes) == (None, 64 * 1024**2)
    both = parse_source_options(
        {"path": "/t", "MAXFILESPERTRIGGER": "3", "maxBytesPerTrigger": "1g"}
    )
    assert (both.file_limit, both.max_bytes) == (3, 1024**3)


def test_earliest_is_an_option_value() -> None:
    options = parse_source_options({"path": "/t", "startingVersion": " Earliest "})
    assert (options.starting_earliest, options.starting_version, options.has_start) == (
        True,
        None,
        True,
    )


def test_storage_options_pass_through_and_typos_fail() -> None:
    options = parse_source_options({"path": "s3://b/t", "storage.AWS_REGION": "eu-west-1"})
    assert options.storage == {"AWS_REGION": "eu-west-1"}
    with pytest.raises(ChangelogSourceError, match=r"UNKNOWN_OPTION.*'startVersion'"):
        parse_source_options({"path": "/t", "startVersion": "1"})
    with pytest.raises(ChangelogSourceError, match=r"INVALID_CDC_OPTION\.MISSING_PATH"):
        parse_source_options({})
    with pytest.raises(ChangelogSourceError, match=r"INVALID_CDC_OPTION\.INVALID_NUMBER"):
        parse_source_options({"path": "/t", "maxFilesPerTrigger": "0"})


def test_offsets_round_trip_and_refuse_foreign_or_backward_ones() -> None:
    offset = Offset("table-a", 7, False, 1_000)
    assert Offset.from_json(offset.to_json(), "table-a") == offset
    assert offset.to_json()["index"] == -1
    with pytest.raises(ChangelogSourceError, match="OFFSET_FROM_ANOTHER_TABLE"):
        Offset.from_json(offset.to_json(), "table-b")
    with pytest.raises(ChangelogSourceError, match="INVALID_OFFSET"):
        Offset.from_json({"reservoirVersion": 7}, "table-a")
    with pytest.raises(ChangelogSourceError, match="OFFSET_MOVED_BACKWARDS"):
        check_forward(offset, Offset("table-a", 6, False, 900))
    check_forward(Offset("table-a", None, True, None), offset)  # the unpinned first offset


def test_commit_time_is_strictly_increasing() -> None:
    assert next_timestamp(500, None) == 500
    assert next_timestamp(500, 499) == 500
    assert next_timestamp(500, 500) == 501
    assert next_timestamp(100, 700) == 701


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1970-01-01", 0),
        ("1970-01-01 00:00:01", 1_000),  # no zone: UTC
        ("1970-01-01T00:00:01.5Z", 1_500),
        ("1970-01-01 02:00:00+02:00", 0),
        ("1970-01-01 01:00:00 Europe/Paris", 0),
    ],
)
def test_timestamps(text: str, expected: int) -> None:
    assert parse_timestamp_ms("startingTimestamp", text) == expected


def test_bad_timestamp_names_the_option() -> None:
    with pytest.raises(ChangelogSourceError, match=r"INVALID_TIMESTAMP.*'endingTimestamp'"):
        parse_timestamp_ms("endingTimestamp", "2024-13-45")
