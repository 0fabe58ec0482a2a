"""Errors a query raises on the server, in our wire form (``spark_cdc.server_plugin.errors``).

``raise_error`` can only carry text, so the text is ``[CONDITION] sentence`` and a line of
parameters built in the query from the values it found; the client turns it back into an
exception with that condition. The ``[`` travels as its own literal: an analysis error prints
the plan, literals and all, and must not read as one of ours (that one is Spark's).
"""

from __future__ import annotations

from pyspark.sql.connect import functions as F
from pyspark.sql.connect.column import Column
from spark_cdc.server_plugin.errors import PARAMETERS_PREFIX
from spark_cdc.server_plugin.vocabulary import CONTRACT_VIOLATION

Part = Column | str


def raise_in_query(condition: str, *sentence: Part, **parameters: Column) -> Column:
    """A ``raise_error`` whose text is ``[condition] `` and the sentence's parts."""
    parts = [F.lit("["), F.lit(f"{condition}] ")]
    parts += [F.lit(part) if isinstance(part, str) else part for part in sentence]
    if parameters:
        values = [value.cast("string").alias(name) for name, value in sorted(parameters.items())]
        parts += [F.lit("\n" + PARAMETERS_PREFIX), F.to_json(F.struct(*values))]
    return F.raise_error(F.concat(*parts))


def contract_violation(kind: str, *sentence: Part, **parameters: Column) -> Column:
    return raise_in_query(f"{CONTRACT_VIOLATION}.{kind}", *sentence, **parameters)
