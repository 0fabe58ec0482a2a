"""What a connection takes when not told: Spark Connect's port and the environment variable
that holds the token, for ``spark_cdc.connection`` and the command line alike.

A module of its own, importing nothing: ``spark_cdc.connection`` imports PySpark's Connect
client, and ``spark-cdc --help`` builds its parser (these are in its help) without PySpark.
"""

from __future__ import annotations

TOKEN_ENV = "SPARK_CDC_TOKEN"
DEFAULT_PORT = 15002
