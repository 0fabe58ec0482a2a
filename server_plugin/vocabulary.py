"""The changelog vocabulary every layer shares, in Spark's own spelling (``Changelog.java``).

A leaf: it imports nothing, so it ships to servers with the plugin and the client's layers
read it too; each name is spelled once.
"""

from __future__ import annotations

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
METADATA_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP)

# Spark's CDC range options, the ones a source can also take to skip commits.
RANGE_OPTIONS = (
    "startingVersion",
    "endingVersion",
    "startingTimestamp",
    "endingTimestamp",
    "startingBoundInclusive",
    "endingBoundInclusive",
)

INSERT = "insert"
DELETE = "delete"
UPDATE_PREIMAGE = "update_preimage"
UPDATE_POSTIMAGE = "update_postimage"
CHANGE_TYPES = (INSERT, DELETE, UPDATE_PREIMAGE, UPDATE_POSTIMAGE)

# The condition families a server raises (``spark_cdc.server_plugin.conditions`` holds each
# condition); the client turns a server error that carries one of them back into an
# exception with that condition (spark_cdc.compat.server_errors).
SERVER_CONDITIONS = (
    "DELTA_CHANGELOG",
    "ICEBERG_CHANGELOG",
    "POSTGRES_CHANGELOG",
    "INVALID_CDC_ENVELOPE",
    "INVALID_CDC_OPTION",
    "CHANGELOG_CONTRACT_VIOLATION",
    "INVALID_CHANGELOG_SCHEMA",
    "APPLY_CHANGES",
    "SNAPSHOT_CHANGES",
)
