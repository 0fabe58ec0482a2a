"""One validator of Spark's CDC options (``spark_cdc.server_plugin.cdc_options``): the client
and the ``delta_changelog`` source refuse the same mistake with the same condition, the same
parameters and the same sentence; internal handshakes are no user option."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.errors import AnalysisException
from spark_cdc.rewrite.options import parse_options
from spark_cdc.server_plugin.cdc_options import NULLABLE_SCHEMA, OPTIONS, row_id
from spark_cdc.server_plugin.changefeed.source_options import COMMON_OPTION_NAMES as OPTION_NAMES
from spark_cdc.server_plugin.delta.options import parse_delta_options as parse_source_options
from spark_cdc.server_plugin.errors import ChangelogSourceError

from tests.support.errors import assert_condition

V = "INVALID_CDC_OPTION."
MISTAKES: list[tuple[dict[str, Any], str, dict[str, str]]] = [
    ({"startingVersion": "first"}, V + "INVALID_VERSION",
     {"option": "startingVersion", "value": "first"}),
    ({"startingVersion": "0", "endingVersion": "-1"}, V + "INVALID_VERSION",
     {"option": "endingVersion", "value": "-1"}),
    ({"startingBoundInclusive": "maybe"}, V + "INVALID_BOOLEAN",
     {"option": "startingBoundInclusive", "value": "maybe"}),
    ({"computeUpdates": "yes"}, V + "INVALID_BOOLEAN",
     {"option": "computeUpdates", "value": "yes"}),
    ({"deduplicationMode": "latest"}, V + "INVALID_DEDUPLICATION_MODE", {"mode": "latest"}),
    ({"startingVersion": "1", "startingTimestamp": "2024-01-01"},
     V + "CONFLICTING_RANGE_TYPES", {}),
    ({"endingVersion": "3"}, V + "MISSING_STARTING_VERSION", {}),
    ({"endingTimestamp": "2024-01-01"}, V + "MISSING_STARTING_TIMESTAMP", {}),
    ({"startingVersion": "5", "endingVersion": "2"}, V + "INVALID_RANGE",
     {"endingVersion": "2", "startingVersion": "5"}),
    ({"startingTimestamp": "2024-13-45"}, V + "INVALID_TIMESTAMP",
     {"option": "startingTimestamp", "value": "2024-13-45"}),
    # Several mistakes: the first in Spark's order (booleans, mode, range kind, bounds, values).
    ({"deduplicationMode": "x", "endingBoundInclusive": "no", "endingVersion": "1"},
     V + "INVALID_BOOLEAN", {"option": "endingBoundInclusive", "value": "no"}),
    ({"deduplicationMode": "x", "startingVersion": "1", "endingTimestamp": "t"},
     V + "INVALID_DEDUPLICATION_MODE", {"mode": "x"}),
]  # fmt: skip


def _client(options: dict[str, Any], streaming: bool = False) -> AnalysisException:
    with pytest.raises(AnalysisException) as caught:
        parse_options(options, streaming=streaming)
    return caught.value


def _source(options: dict[str, Any], streaming: bool = False) -> ChangelogSourceError:
    with pytest.raises(ChangelogSourceError) as caught:
        parse_source_options({"path": "/t", **options}, streaming)
    return caught.value


@pytest.mark.parametrize(("options", "condition", "parameters"), MISTAKES)
def test_the_client_and_the_source_refuse_a_mistake_alike(
    options: dict[str, Any], condition: str, parameters: dict[str, str]
) -> None:
    client, source = _client(options), _source(options)
    assert_condition(client, condition, parameters)
    assert (source.condition, source.parameters) == (condition, parameters)
    assert str(client) == f"[{condition}] {source.message}"


def test_a_stream_refuses_its_end_bound_first_on_both_sides() -> None:
    options = {"endingVersion": "x", "deduplicationMode": "y"}
    client, source = _client(options, streaming=True), _source(options, streaming=True)
    assert_condition(client, "INVALID_CDC_OPTION.ENDING_BOUND_IN_STREAM", {})
    assert str(client) == f"[{source.condition}] {source.message}"


def test_row_ids_are_parsed_once() -> None:
    assert row_id(" a, b.c ") == ("a", "b.c")
    with pytest.raises(ChangelogSourceError) as caught:
        row_id("id,")
    assert (caught.value.condition, caught.value.parameters) == (
        "INVALID_CDC_OPTION.INVALID_ROW_ID",
        {"option": "rowId", "value": "id,"},
    )
    assert parse_source_options({"path": "/t", "rowId": "a, b"}).row_id == ("a", "b")


def test_the_nullable_schema_handshake_is_no_user_option() -> None:
    assert NULLABLE_SCHEMA not in {o.name for o in OPTIONS}
    assert all("nullable" not in name.lower() for name in OPTION_NAMES)
    source = _source({"maxFilesPerTriger": "1"})
    assert source.condition == "INVALID_CDC_OPTION.UNKNOWN_OPTION"
    assert "nullable" not in source.message.lower()
    assert source.parameters["proposal"] == "maxFilesPerTrigger"
    handshake = parse_source_options({"path": "/t", NULLABLE_SCHEMA: "true"})
    assert handshake.nullable_schema


def test_every_option_is_documented_once() -> None:
    names = [o.name for o in OPTIONS]
    assert len(names) == len(set(names))
    assert {o.scope for o in OPTIONS} == {"cdc", "reader", "source", "iceberg"}
    documented = set(names)
    assert set(OPTION_NAMES) - {"rowId", "deduplicationMode", "computeUpdates"} <= documented
    assert all(o.description.endswith(".") for o in OPTIONS)
