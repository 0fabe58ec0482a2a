#!/usr/bin/env bash
# Starts the Spark Connect server in the foreground. Inside the container it listens on all
# interfaces so the published port works; docker-compose.yml publishes it on 127.0.0.1 only.
# The token is passed as a conf and never echoed (Spark redacts "token" keys in its logs).
set -euo pipefail
args=(
  --conf "spark.connect.grpc.binding.address=0.0.0.0"
  --conf "spark.connect.grpc.binding.port=${SPARK_CONNECT_PORT}"
  --conf "spark.sql.shuffle.partitions=${SPARK_SHUFFLE_PARTITIONS:-8}"
  --conf "spark.ui.enabled=false"
  --driver-memory "${SPARK_DRIVER_MEMORY:-4g}"
)
if [[ -n "${SPARK_CONNECT_TOKEN:-}" ]]; then
  args+=(--conf "spark.connect.authenticate.token=${SPARK_CONNECT_TOKEN}")
else
  echo "warning: SPARK_CONNECT_TOKEN is empty: the server accepts clients without a token" >&2
fi
exec "${SPARK_HOME:-/opt/spark}/sbin/start-connect-server.sh" "${args[@]}" "$@"
