"""Errors raised on the client, under Spark's own error conditions.

They subclass PySpark's ``AnalysisException`` because Spark raises these conditions as
analysis errors too: code written for native CDC (``except AnalysisException``,
``e.getCondition()``) keeps working when it moves to client-side CDC.
"""

from __future__ import annotations

from pyspark.errors import AnalysisException


class CdcAnalysisException(AnalysisException):
    """A CDC request the client refuses before anything reaches the server."""

    def __init__(self, condition: str, message: str, **parameters: str) -> None:
        super().__init__(message=message, errorClass=condition, messageParameters=parameters)


def invalid_option(kind: str, message: str, **parameters: str) -> CdcAnalysisException:
    return CdcAnalysisException(f"INVALID_CDC_OPTION.{kind}", message, **parameters)


def unsupported_output_mode(mode: str) -> CdcAnalysisException:
    return CdcAnalysisException(
        "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION",
        f"Output mode '{mode}' is not supported for Change Data Capture (CDC) streaming reads "
        "with post-processing (carry-over removal, update detection or net changes): they emit "
        "each change once and never revise it. Use outputMode('append'), the default.",
        outputMode=mode,
    )


def downstream_watermark() -> CdcAnalysisException:
    return CdcAnalysisException(
        "UNSUPPORTED_FEATURE.CDC_DOWNSTREAM_WATERMARK",
        "withWatermark() applied after CDC post-processing would stall this query: Spark "
        "keeps one global watermark, the minimum of all, and rows reach your watermark only "
        "after CDC's own watermark on _commit_timestamp has released them, so neither ever "
        "advances. Apply withWatermark() to the change feed before post_process(), or write "
        "the post-processed feed to a table and watermark the stream that reads it.",
    )


def unsupported_net_changes_column(column: str, data_type: str) -> CdcAnalysisException:
    return CdcAnalysisException(
        "UNSUPPORTED_FEATURE.CDC_NET_CHANGES_MAP_KEY",
        f"Streaming netChanges carries each row through JSON, which cannot hold the non-string "
        f"map keys of column '{column}' ({data_type}). Turn the map into an array (e.g. "
        "map_entries) before post-processing, or compute net changes in batch.",
        column=column,
    )


# Raised on the server by ``raise_error`` inside the query: the condition leads the message
# so it survives the trip back as ``[CONDITION] ...`` text in the server's error.
CONTRACT_VIOLATION = "CHANGELOG_CONTRACT_VIOLATION"


def contract_violation_message(kind: str, detail: str) -> str:
    return f"[{CONTRACT_VIOLATION}.{kind}] {detail}"
