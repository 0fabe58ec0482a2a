"""Errors a rewrite raises, under the conditions of the one registry
(``spark_cdc.server_plugin.conditions``).

Refusals while a plan is built subclass PySpark's ``AnalysisException`` because Spark
raises these conditions as analysis errors too: code written for native CDC (``except
AnalysisException``, ``e.getCondition()``) keeps working when it moves to client-side CDC.
A refusal is a registry name and its parameters (``cdc_error``), filled through the same
template as the server's errors, so one mistake reads the same on both sides. Contract
violations are found while the query runs, on the server (``spark_cdc.rewrite.raised``).
"""

from __future__ import annotations

from pyspark.errors import AnalysisException
from spark_cdc.server_plugin.conditions import format_message
from spark_cdc.server_plugin.errors import ChangelogSourceError


class CdcAnalysisException(AnalysisException):
    """A CDC request refused on the client, before anything reaches the server.

    An ``AnalysisException``, as Spark raises for a bad query, so existing ``except``
    clauses keep working; ``getCondition()`` and ``getMessageParameters()`` say what was
    refused.

    Examples
    --------
    >>> import spark_cdc
    >>> try:
    ...     spark_cdc.read(spark).option("startingVersion", "latest").load("/data/orders")
    ... except spark_cdc.CdcAnalysisException as e:
    ...     print(e.getCondition())
    INVALID_CDC_OPTION.LATEST_IN_BATCH
    """

    def __init__(self, condition: str, /, **parameters: object) -> None:
        values = {name: str(value) for name, value in parameters.items()}
        super().__init__(
            message=format_message(condition, values),
            errorClass=condition,
            messageParameters=values,
        )


def cdc_error(name: str, **parameters: object) -> CdcAnalysisException:
    """The one way the client raises: ``raise cdc_error("FAMILY.SUB", param=value)``."""
    return CdcAnalysisException(name, **parameters)


def as_analysis_exception(error: ChangelogSourceError) -> CdcAnalysisException:
    """A refusal of the shared validator (``spark_cdc.server_plugin.cdc_options``), raised on
    the client as what it is there: the same condition, parameters and sentence."""
    return CdcAnalysisException(error.condition, **error.parameters)
