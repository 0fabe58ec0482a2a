"""A Spark Connect server whose sessions and streaming queries share their Python workers:
the driver program ``spark-submit`` runs for ``spark-cdc serve --shared-python-workers`` (and
the container's ``SPARK_CDC_SHARED_PYTHON_WORKERS=true``).

Why: Spark keys its Python worker daemons by the session's artifact state, and every
streaming query runs in a clone of its session. With artifact isolation on, each streaming
query with a Python data source writer starts three daemons of its own
(``create_data_source``, ``write_into_data_source``, ``python_streaming_sink_runner``), about
0.6 s each here, and keeps them after the query ends (SPARK-54055): a scheduled
``availableNow`` run of a small batch took 4.1 s against 1.2 s with the daemons shared
(measured on 4.3, 2 cores), and a server running one such job an hour gathers six idle Python
processes an hour. ``SparkConnectServer`` (and ``SimpleSparkConnectService``) force isolation
on, so the service is started as Spark's plugin instead
(``spark.plugins=org.apache.spark.sql.connect.SparkConnectPlugin``), by this program, with
``spark.sql.artifact.isolation.enabled=false``.

What it gives up: an artifact one client adds (``addArtifacts``: files, archives, jars) is
seen by every session of the server. A server one user or one job owns loses nothing.

Runs in the server's Python as a ``spark-submit`` primary resource; the settings (the plugin
and isolation among them) come from ``spark-submit``'s ``--conf``.
"""

from __future__ import annotations

import threading

# spark_cdc.testing.local_server waits for this line (SparkConnectServer logs it too).
READY_LINE = "Spark Connect server started"
PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
SETTINGS = {"spark.plugins": PLUGIN, "spark.sql.artifact.isolation.enabled": "false"}


def main() -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()  # the plugin starts the service here
    port = spark.conf.get("spark.connect.grpc.binding.port", "15002")
    print(f"{READY_LINE} (shared Python workers) on port {port}", flush=True)
    threading.Event().wait()  # spark-submit's JVM owns the process; its stop ends this one


if __name__ == "__main__":
    main()
