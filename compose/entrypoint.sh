#!/usr/bin/env bash
# Starts the Spark Connect server in the foreground (PID 1: `docker stop` reaches the JVM).
# Inside the container it listens on all interfaces so the published port works;
# docker-compose.yml publishes it on 127.0.0.1 only. The token comes in the environment
# (SPARK_CONNECT_AUTHENTICATE_TOKEN, read by the server itself), never on a command line,
# and never in the log.
# Extra arguments go to spark-submit (e.g. --conf spark.sql.shuffle.partitions=4).
set -euo pipefail
log=/tmp/spark-connect.log
: > "$log"  # a restarted container must not look started before the server is
# Spark's foreachBatch worker prints its session URL, token and all ("... url
# sc://localhost:15002/;user_id=;token=<token> ..."): every token= value is masked on its way
# to the log and to `docker logs`.
exec > >(sed -u -E 's/(token=)[^;[:space:]]+/\1***/g' | tee -a "$log") 2>&1
if [[ -z "${SPARK_CONNECT_AUTHENTICATE_TOKEN:-}" ]]; then
  echo "warning: SPARK_CONNECT_AUTHENTICATE_TOKEN is empty: the server accepts clients without a token"
fi
# Spark keeps a Python worker daemon per session for the server's life (SPARK-54055): the
# idle ones are stopped, their ports held (spark_cdc.testing.idle_daemons, beside the server:
# $$ is the server's process, as exec keeps it; SPARK_CDC_DAEMON_IDLE_SECONDS=0: never).
python -m spark_cdc.testing.idle_daemons $$ "${SPARK_CDC_DAEMON_IDLE_SECONDS:-120}" &
# SPARK_CDC_SHARED_PYTHON_WORKERS=true: sessions and streaming queries share their Python
# workers (and artifacts): Spark's Connect plugin with artifact isolation off, started by
# spark_cdc.server_plugin.shared_workers_server (SparkConnectServer forces isolation on).
if [[ "${SPARK_CDC_SHARED_PYTHON_WORKERS:-false}" == true ]]; then
  server=(
    --conf "spark.plugins=org.apache.spark.sql.connect.SparkConnectPlugin"
    --conf "spark.sql.artifact.isolation.enabled=false"
    "$(python -c 'import spark_cdc.server_plugin.shared_workers_server as m; print(m.__file__)')"
  )
else
  server=(--class org.apache.spark.sql.connect.service.SparkConnectServer spark-internal)
fi
# Filters reach Python data sources (Spark 4.1+; a name 4.0 ignores): the change feeds use
# them where no plan cache hands one query's pushed read to another, which the static
# planCache.maxSize=0 ensures and SPARK_CDC_FILTER_PUSHDOWN declares to them
# (spark_cdc.server_plugin.changefeed.pushdown, docs/reading-changes.md). Extra arguments
# that set the cache's size take the declaration back.
if [[ " $* " != *"spark.connect.session.planCache.maxSize="* ]]; then
  export SPARK_CDC_FILTER_PUSHDOWN=true
fi
exec "$SPARK_HOME/bin/spark-submit" \
  --driver-memory "${SPARK_DRIVER_MEMORY:-4g}" \
  --driver-java-options "-Dlog4j2.configurationFile=file:/opt/spark-cdc/log4j2.properties" \
  --conf "spark.connect.grpc.binding.address=0.0.0.0" \
  --conf "spark.connect.grpc.binding.port=${SPARK_CONNECT_PORT}" \
  --conf "spark.ui.enabled=false" \
  --conf "spark.sql.python.filterPushdown.enabled=true" \
  --conf "spark.connect.session.planCache.maxSize=0" \
  --name spark-cdc-connect \
  "$@" \
  "${server[@]}"
