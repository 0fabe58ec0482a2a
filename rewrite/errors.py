"""Errors a rewrite raises, under Spark's own error conditions.

Refusals while a plan is built subclass PySpark's ``AnalysisException`` because Spark
raises these conditions as analysis errors too: code written for native CDC (``except
AnalysisException``, ``e.getCondition()``) keeps working when it moves to client-side CDC.
Contract violations are found while the query runs, on the server: their text leads with
the condition in Spark's ``[CONDITION] ...`` form, which the client turns back into an
exception with that condition (``spark_cdc.compat.server_errors``).
"""

from __future__ import annotations

from pyspark.errors import AnalysisException
from spark_cdc.server_plugin.vocabulary import (
    CONTRACT_VIOLATION,
    INVALID_CDC_OPTION,
    INVALID_CHANGELOG_SCHEMA,
)


class CdcAnalysisException(AnalysisException):
    """A CDC request refused on the client, before anything reaches the server."""

    def __init__(self, condition: str, message: str, **parameters: str) -> None:
        super().__init__(message=message, errorClass=condition, messageParameters=parameters)


def invalid_option(kind: str, message: str, **parameters: str) -> CdcAnalysisException:
    return CdcAnalysisException(f"{INVALID_CDC_OPTION}.{kind}", message, **parameters)


def missing_row_id(message: str, **parameters: str) -> CdcAnalysisException:
    return CdcAnalysisException(f"{INVALID_CHANGELOG_SCHEMA}.MISSING_ROW_ID", message, **parameters)


def unsupported_net_changes_column(column: str, data_type: str) -> CdcAnalysisException:
    return CdcAnalysisException(
        "UNSUPPORTED_FEATURE.CDC_NET_CHANGES_MAP_KEY",
        f"Streaming netChanges carries each row through JSON, which cannot hold the non-string "
        f"map keys of column '{column}' ({data_type}). Turn the map into an array (e.g. "
        "map_entries) before post-processing, or compute net changes in batch.",
        column=column,
        dataType=data_type,
    )


def contract_violation_message(kind: str, detail: str) -> str:
    """Raised on the server by ``raise_error`` inside the query, or by the net changes
    operator: the condition leads the text so it survives the trip back."""
    return f"[{CONTRACT_VIOLATION}.{kind}] {detail}"
