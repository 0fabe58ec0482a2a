"""Which code runs server-side work (``rewrite.server_code``): the server's installed copy
whenever its protocol is this client's, code shipped from here only to the same Python,
and a named refusal otherwise; and the apply sink's options carry its spec whole."""

from __future__ import annotations

from datetime import timedelta

import pytest
from spark_cdc.rewrite.errors import CdcAnalysisException
from spark_cdc.rewrite.server_code import ServerFacts, client_python, runs_installed_code
from spark_cdc.server_plugin.server_info import PROTOCOL
from spark_cdc.server_plugin.sinks.apply.engine.spec import ApplySpec
from spark_cdc.server_plugin.sinks.apply.sink import spec_from_options, spec_options

OTHER = "3.99"


@pytest.mark.parametrize("python", [client_python(), OTHER])
def test_a_server_with_the_package_runs_its_own_copy_for_any_client(python: str) -> None:
    assert runs_installed_code(ServerFacts(python, PROTOCOL, "0.1.0"), "apply_changes")


@pytest.mark.parametrize("protocol", [None, PROTOCOL + 1])
def test_the_same_python_gets_code_shipped_from_here(protocol: int | None) -> None:
    assert not runs_installed_code(ServerFacts(client_python(), protocol), "apply_changes")


def test_another_python_without_the_package_is_refused_naming_both() -> None:
    with pytest.raises(CdcAnalysisException) as refused:
        runs_installed_code(ServerFacts(OTHER), "Streaming net changes")
    assert refused.value.getCondition() == "SPARK_CDC.SERVER_PYTHON_MISMATCH"
    assert refused.value.getMessageParameters() == {
        "feature": "Streaming net changes",
        "serverPython": OTHER,
        "clientPython": client_python(),
    }
    assert "install 'spark-cdc-connect[server]'" in str(refused.value)


def test_another_python_with_another_protocol_is_refused_naming_the_releases() -> None:
    with pytest.raises(CdcAnalysisException) as refused:
        runs_installed_code(ServerFacts(OTHER, PROTOCOL + 1, "9.9.9"), "apply_changes")
    assert refused.value.getCondition() == "SPARK_CDC.SERVER_PACKAGE_MISMATCH"
    assert refused.value.getMessageParameters() == {
        "feature": "apply_changes",
        "server": "9.9.9",
        "serverProtocol": str(PROTOCOL + 1),
        "protocol": str(PROTOCOL),
    }


def test_the_apply_sinks_options_carry_its_spec_and_keep_storage_apart() -> None:
    spec = ApplySpec(
        target="s3://b/t",
        state="s3://b/t__state",
        keys=("id", "region"),
        columns=("id", "region", "v"),
        sequence_names=("_commit_version",),
        scd_type=2,
        tracked=("v",),
        ignore_null_updates=True,
        changelog_pairs=True,
        schema_evolution=False,
        app_id="spark-cdc-apply-x",
        tombstone_retention_ms=int(timedelta(days=1).total_seconds() * 1000),
        storage_options=(
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
        ),
    )
    options = spec_options(spec)
    assert "s" not in options["spec"].split('"')  # the secret is not in the spec's text
    assert options["storage.AWS_SECRET_ACCESS_KEY"] == "s"
    assert spec_from_options(options) == spec


def _what_a_client_sends() -> dict[str, object]:
    """The shapes a client's requests to the server's installed code take: the apply sink's
    spec and option names, the net changes operator's rules and
    its function's parameters, and the operator's row layout."""
    import dataclasses
    import inspect

    from spark_cdc.rewrite import net_state
    from spark_cdc.server_plugin.sinks.apply import sink

    return {
        "apply spec": [f.name for f in dataclasses.fields(ApplySpec)],
        "apply options": [
            sink.SPEC_OPTION,
            sink.STORAGE_PREFIX,
            sink.CATALOG_PREFIX,
            sink.SET_ASIDE_OPTION,
            sink.READ_OPTION,
        ],
        "apply outcome": sink.OUTCOME_SCHEMA,
        "net rules": [f.name for f in dataclasses.fields(net_state.NetRules)],
        "net function": list(inspect.signature(net_state.net_changes).parameters),
        "net rows": [net_state.OUTPUT_SCHEMA, net_state.STATE_SCHEMA, net_state.BUCKETS],
    }


# What each protocol's clients send. A change to any of these shapes is a new protocol: bump
# server_plugin.server_info.PROTOCOL and record the new shapes here (servers of the old one
# then refuse clients of the new one by name instead of failing in a worker).
_PROTOCOL_1 = {
    "apply spec": [
        "target",
        "state",
        "keys",
        "columns",
        "sequence_names",
        "scd_type",
        "tracked",
        "ignore_null_updates",
        "changelog_pairs",
        "schema_evolution",
        "app_id",
        "tombstone_retention_ms",
        "storage_options",
        "compact_after_files",
    ],
    "apply options": ["spec", "storage."],
    "apply outcome": "changes long, keys long, rows long",
    "net rules": ["carryover_removal", "by_row_version", "update_detection", "compute_updates"],
    "net function": ["rules", "key", "frames", "state"],
    "net rows": ["data string, meta string, change string", "windows binary", 256],
}
PROTOCOLS = {
    1: _PROTOCOL_1,
    2: {
        **_PROTOCOL_1,
        "apply spec": [*_PROTOCOL_1["apply spec"], "target_name"],
        "apply outcome": "batch long, changes long, keys long, rows long",
    },
}
PROTOCOLS[3] = {
    **PROTOCOLS[2],
    "apply spec": [
        *_PROTOCOL_1["apply spec"],
        "target_name",
        "table_properties",
        "partition_cols",
    ],
}
PROTOCOLS[4] = {
    **PROTOCOLS[3],
    "apply spec": [*PROTOCOLS[3]["apply spec"], "partitioned_by_key"],  # type: ignore[list-item]
}
# 5: the feed carries its keys' hash, and the spec the buckets a new state is laid out in.
PROTOCOLS[5] = {
    **PROTOCOLS[4],
    "apply spec": [*PROTOCOLS[4]["apply spec"], "key_buckets"],  # type: ignore[list-item]
}

# 6: Iceberg targets: the target's format and its catalog's properties (``catalog.<KEY>``).
PROTOCOLS[6] = {
    **PROTOCOLS[5],
    "apply spec": [*PROTOCOLS[5]["apply spec"], "target_format", "catalog"],  # type: ignore[list-item]
    "apply options": ["spec", "storage.", "catalog."],
}


# 7: a full refresh (a stream's sets its checkpoint aside by a read of the sink, and the
# new checkpoint names the writer its batches are applied as).
PROTOCOLS[7] = {
    **PROTOCOLS[6],
    "apply spec": [*PROTOCOLS[6]["apply spec"], "full_refresh", "checkpoint"],  # type: ignore[list-item]
    "apply options": ["spec", "storage.", "catalog.", "setCheckpointAside"],
}


# 8: snapshots (``apply_changes_from_snapshot``): the spec's snapshot version and base,
# and the sink's reads of a writer's status and of the target's rows.
PROTOCOLS[8] = {
    **PROTOCOLS[7],
    "apply spec": [*PROTOCOLS[7]["apply spec"], "snapshot_version", "snapshot_base"],  # type: ignore[list-item]
    "apply options": ["spec", "storage.", "catalog.", "setCheckpointAside", "read"],
}


def test_what_a_client_sends_is_the_protocols() -> None:
    assert _what_a_client_sends() == PROTOCOLS[PROTOCOL]
