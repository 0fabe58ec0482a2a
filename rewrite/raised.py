"""Errors a query raises on the server, in our wire form (``spark_cdc.server_plugin.errors``).

``raise_error`` can only carry text, so the text is ``[CONDITION] sentence`` and a line of
parameters, built in the query: the sentence is the condition's registry template
(``spark_cdc.server_plugin.conditions``) with each ``<param>`` replaced by the column that
holds its value, and the parameters are those columns as JSON. The client turns the text back
into an exception with that condition. The ``[`` travels as its own literal: an analysis
error prints the plan, literals and all, and must not read as one of ours (that one is
Spark's).
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql.connect import functions as F
from spark_cdc.server_plugin.conditions import PLACEHOLDER, condition
from spark_cdc.server_plugin.errors import PARAMETERS_PREFIX


def raise_in_query(name: str, **parameters: Column) -> Column:
    """A ``raise_error`` of condition ``name``, its template filled with ``parameters``."""
    template = condition(name)
    if set(parameters) != set(template.parameters):
        raise ValueError(f"{name} takes {sorted(template.parameters)}, got {sorted(parameters)}")
    texts = {key: value.cast("string") for key, value in parameters.items()}
    parts = [F.lit("["), F.lit(f"{name}] ")]
    for index, piece in enumerate(PLACEHOLDER.split(template.message)):
        if index % 2:
            parts.append(F.coalesce(texts[piece], F.lit("NULL")))
        elif piece:
            parts.append(F.lit(piece))
    if parameters:
        values = [F.coalesce(texts[key], F.lit("NULL")).alias(key) for key in sorted(texts)]
        parts += [F.lit("\n" + PARAMETERS_PREFIX), F.to_json(F.struct(*values))]
    return F.raise_error(F.concat(*parts))
