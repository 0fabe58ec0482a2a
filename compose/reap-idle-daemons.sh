#!/usr/bin/env bash
# Stops the Python worker daemons that Spark leaves behind, so a long-running server does not
# grow with every Spark Connect session it ever served.
#
# Spark starts one forking daemon per session and per kind of Python worker and keeps it until
# the server stops, also after the session ended (SPARK-54055): about 120 MB each, three per
# session that reads a change feed; a test suite's sessions filled 24 GiB. A daemon that has
# had no worker for SPARK_CDC_DAEMON_IDLE_SECONDS (600 by default; 0 turns this off) is
# stopped. Its session, if it is still alive, gets a new one with its next Python task:
# Spark restarts a daemon it cannot reach (measured on 4.3). Turning the daemon off
# (spark.python.use.daemon=false) would fix it too, but made streaming twice as slow.
set -uo pipefail
idle_after=${SPARK_CDC_DAEMON_IDLE_SECONDS:-600}
(( idle_after > 0 )) || exit 0
interval=$(( idle_after < 60 ? idle_after : 60 ))
declare -A since=()
while sleep "$interval"; do
  now=$(date +%s)
  declare -A seen=()
  for pid in $(pgrep -f -- "-m pyspark.daemon"); do
    parent=$(ps -o ppid= -p "$pid" | tr -d ' ')
    # A daemon's forked workers carry its command line: only the daemons themselves count.
    [[ -n "$parent" && $(ps -o args= -p "$parent") != *pyspark.daemon* ]] || continue
    seen[$pid]=1
    if [[ -z "${since[$pid]:-}" ]] || pgrep -P "$pid" >/dev/null; then
      since[$pid]=$now  # first seen, or busy: idle from now
    elif (( now - since[$pid] >= idle_after )); then
      kill "$pid" 2>/dev/null
      unset "since[$pid]"
    fi
  done
  for pid in "${!since[@]}"; do
    [[ -n "${seen[$pid]:-}" ]] || unset "since[$pid]"
  done
done
