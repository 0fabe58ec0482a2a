"""What a connection takes when not told: Spark Connect's port and the environment variables
that hold the token and how long a lost server is waited for, for ``spark_cdc.connection``
and the command line alike.

A module of its own, importing nothing: ``spark_cdc.connection`` imports PySpark's Connect
client, and ``spark-cdc --help`` builds its parser (these are in its help) without PySpark.
"""

from __future__ import annotations

TOKEN_ENV = "SPARK_CDC_TOKEN"
# Seconds a session goes on retrying a lost connection before SPARK_CDC_CONNECTION.SERVER_GONE.
SERVER_GONE_AFTER_ENV = "SPARK_CDC_SERVER_GONE_AFTER"
DEFAULT_PORT = 15002
