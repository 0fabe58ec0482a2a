"""A Spark standalone cluster on this machine (a master and a worker running two one-core
executors, from the installed PySpark's jars), for the tests that check work is spread over
executors: a local server runs every task in its own JVM."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from spark_cdc.testing.local_server import check_full_pyspark, find_java, free_port

HOST = "127.0.0.1"


@contextmanager
def standalone_cluster(folder: Path, executors: int = 2) -> Iterator[tuple[str, Path]]:
    """A master's URL and the worker's folder (each executor's logs under
    ``app-*/<id>/stderr``), both processes always stopped."""
    spark_home = check_full_pyspark()
    java = find_java()
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home),
        "JAVA_HOME": str(Path(os.path.realpath(java)).parent.parent),
        "PYSPARK_PYTHON": sys.executable,  # the executors' Python workers run ours
        "SPARK_LOCAL_IP": HOST,
    }
    env.pop("SPARK_REMOTE", None)
    port = free_port(HOST)
    master_url = f"spark://{HOST}:{port}"
    work = folder / "worker"
    work.mkdir(parents=True)
    spark_class = str(spark_home / "bin" / "spark-class")
    commands = {
        "master": [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            *("--host", HOST, "--port", str(port), "--webui-port", str(free_port(HOST))),
        ],
        "worker": [
            spark_class,
            "org.apache.spark.deploy.worker.Worker",
            master_url,
            *("--host", HOST, "--cores", str(executors), "--memory", f"{executors}g"),
            *("--work-dir", str(work), "--webui-port", str(free_port(HOST))),
        ],
    }
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for name, command in commands.items():
            log = open(folder / f"{name}.log", "wb")  # noqa: SIM115 - the child's
            processes.append(
                subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
            )
            log.close()
            _wait_for(folder / f"{name}.log", _READY[name], processes[-1])
        yield master_url, work
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


_READY = {"master": "I have been elected leader", "worker": "Successfully registered with master"}


def _wait_for(log: Path, line: str, process: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while line not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{log.name} did not say {line!r}:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def executor_logs(work: Path) -> list[str]:
    """Each executor's log (its stderr), in executor order."""
    return [p.read_text(errors="replace") for p in sorted(work.glob("app-*/*/stderr"))]
