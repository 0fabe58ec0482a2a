"""Start and stop a Spark Connect server from the installed ``pyspark`` wheel.

pip's ``pyspark`` 4.0/4.1 ship no ``sbin/start-connect-server.sh``, so the server class is
launched through ``spark-submit`` on every version. Everything binds to 127.0.0.1 and the
web UI is off unless the caller asks otherwise: a server we start is never reachable from
another machine by accident. It never outlives the process that started it, however that
ends (``server_watchdog``), and stops the Python daemons its ended sessions leave
(``idle_daemons``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import site
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pyspark
from spark_cdc.server_plugin import shared_workers_server
from spark_cdc.server_plugin.changefeed.pushdown import PLAN_CACHE_SIZE, SAFE_ENV
from spark_cdc.server_plugin.conditions import ConditionError
from spark_cdc.state_partitions import PER_TASK_SLOT, SHUFFLE_PARTITIONS
from spark_cdc.testing import server_watchdog
from spark_cdc.testing.idle_daemons import DEFAULT_IDLE_SECONDS, IdleDaemonReaper

READY_LINE = shared_workers_server.READY_LINE
DISCOVERY_MODULES = (
    "pyspark_delta_changelog",
    "pyspark_iceberg_changelog",
    "pyspark_postgres_changelog",
    "pyspark_postgres_slots",
    "pyspark_spark_cdc_apply",
    "pyspark_spark_cdc_server",
    "pyspark_spark_cdc_spool",
)
_CLIENT_ONLY_ENV = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE")
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
SUPPORTED_JAVA = (17, 21)

# Warnings and errors only, except the one line that says the server is ready.
_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.server.name = org.apache.spark.sql.connect.service.SparkConnectServer
logger.server.level = info
"""


class ServerStartError(ConditionError, RuntimeError):
    """The server could not be started; the message says why in one sentence."""


def check_full_pyspark() -> Path:
    """The installed pyspark's folder (SPARK_HOME), if it is full PySpark, with Spark's jars;
    else raise: the jar-free Connect client (pyspark-client) cannot start a server."""
    spark_home = Path(pyspark.__file__).parent
    if not (spark_home / "jars").is_dir():
        raise ServerStartError("SPARK_CDC_LOCAL_SERVER.NEEDS_FULL_PYSPARK")
    return spark_home


def find_java() -> str:
    """Return the ``java`` Spark will use, or raise with the one-line fix."""
    java_home = os.environ.get("JAVA_HOME")
    candidates = [str(Path(java_home) / "bin" / "java")] if java_home else []
    on_path = shutil.which("java")
    if on_path:
        candidates.append(on_path)
    for java in candidates:
        if os.access(java, os.X_OK):
            major = java_major_version(java)
            if major in SUPPORTED_JAVA:
                return java
            raise ServerStartError(
                "SPARK_CDC_LOCAL_SERVER.UNSUPPORTED_JAVA", java=java, version=major
            )
    raise ServerStartError("SPARK_CDC_LOCAL_SERVER.JAVA_NOT_FOUND")


def java_major_version(java: str) -> int | None:
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 and match.group(2) else major


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


@dataclass(eq=False)
class LocalServer:
    """A running server process; ``stop()`` ends it and everything it spawned."""

    port: int
    host: str
    log_path: Path
    process: subprocess.Popen[bytes]
    token: str | None = field(default=None, repr=False)
    scratch: Path | None = None
    """The folder made for the log when none was given: removed when the server stops."""
    reaper: IdleDaemonReaper | None = None
    watchdog: Watchdog | None = None

    @property
    def url(self) -> str:
        # The client sends a token without TLS only to "localhost" (gRPC local credentials).
        url = f"sc://localhost:{self.port}"
        return f"{url}/;token={self.token}" if self.token else url

    def log_tail(self, lines: int = 80) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to the server's whole process group (spark-submit, the JVM, its Python
        workers), SIGKILL after ``timeout``: nothing it started is left behind."""
        try:
            if self.alive():
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        except ProcessLookupError:
            pass
        finally:
            self._ended()

    def kill(self) -> None:
        """SIGKILL to the whole process group, at once."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        self._ended()

    def _ended(self) -> None:
        RUNNING.discard(self)
        if self.watchdog is not None:
            self.watchdog.release()
        if self.reaper is not None:
            self.reaper.stop()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


class Watchdog:
    """``server_watchdog`` beside a server: stops it, and removes ``folder``, when this
    process ends without doing so (SIGKILL, the OOM killer). ``release()``, once the server
    is stopped, ends it and leaves the folder to this process."""

    def __init__(self, group: int, folder: Path | None = None) -> None:
        reading, self._writing = os.pipe()  # neither end is inherited by other children
        command = [sys.executable, "-I", "-S", server_watchdog.__file__, str(group)]
        try:
            self.process = subprocess.Popen(
                [*command, *([str(folder)] if folder else [])],
                stdin=reading,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # not in the server's group, nor the terminal's
            )
        finally:
            os.close(reading)

    def release(self) -> None:
        if self._writing < 0:
            return
        os.write(self._writing, server_watchdog.RELEASED)
        os.close(self._writing)
        self._writing = -1
        try:
            self.process.wait(timeout=server_watchdog.GRACE_S + 5)
        except subprocess.TimeoutExpired:
            self.process.kill()


# The servers this process started and has not stopped yet (a command line's second Ctrl-C
# kills them without waiting).
RUNNING: set[LocalServer] = set()


def start_local_server(
    *,
    port: int | None = None,
    host: str = "127.0.0.1",
    token: str | None = None,
    conf: Mapping[str, str] | None = None,
    driver_memory: str = "4g",
    log_path: str | Path | None = None,
    extra_python_path: list[str] | None = None,
    timeout: float = 240.0,
    discover: bool = True,
    idle_daemon_seconds: float | None = DEFAULT_IDLE_SECONDS,
    shared_python_workers: bool = False,
    orphans_folder: Path | None = None,
) -> LocalServer:
    """Start ``SparkConnectServer`` and return once it accepts connections.

    ``orphans_folder``: a temporary folder of the caller's (the one ``log_path`` is in, say)
    that the server's watchdog removes when this process ends without stopping the server
    (SIGKILL): nobody else would. A folder this makes for the log when none is given is
    removed so anyway.

    ``shared_python_workers``: the server's sessions and streaming queries share their Python
    worker processes (and their artifacts): Spark's Connect plugin started by
    ``server_plugin.shared_workers_server`` with artifact isolation off, instead of
    ``SparkConnectServer``, which forces it on. A streaming query with a Python data source
    writer then starts no Python process of its own (see that module for the measure and the
    cost).

    ``idle_daemon_seconds``: the server's Python worker daemons that had no worker for that
    long are stopped (``idle_daemons``: Spark keeps one per ended session for ever); None
    keeps them.

    ``discover=False`` hides this package's sources and sinks from Spark's discovery when
    the package is not installed where Spark looks (an editable install): the server then
    shows its clients what a server without the package does.

    ``driver_memory`` defaults to 4g: the stock 1g dies with OutOfMemoryError under a
    streaming aggregation of a few million rows.
    """

    def start(port: int) -> LocalServer:
        return _start(
            port, host, token, conf, driver_memory, log_path, extra_python_path, timeout,
            discover, idle_daemon_seconds, shared_python_workers, orphans_folder,
        )  # fmt: skip

    if port is not None:
        return start(port)
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        try:
            return start(free_port(host))
        except ServerStartError as error:
            # A port free when chosen can be taken before the JVM binds it (measured in CI:
            # another process's ephemeral port): a port we chose is chosen again.
            if attempt == _PORT_ATTEMPTS or not _port_taken(error):
                raise
    raise AssertionError("unreachable")


_PORT_ATTEMPTS = 3
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


def _port_taken(error: ServerStartError) -> bool:
    if error.getCondition() == "SPARK_CDC_LOCAL_SERVER.PORT_IN_USE":
        return True
    return "java.net.BindException" in error.getMessageParameters().get("tail", "")


def _start(
    port: int,
    host: str,
    token: str | None,
    conf: Mapping[str, str] | None,
    driver_memory: str,
    log_path: str | Path | None,
    extra_python_path: list[str] | None,
    timeout: float,
    discover: bool,
    idle_daemon_seconds: float | None,
    shared_python_workers: bool,
    orphans_folder: Path | None,
) -> LocalServer:
    spark_home = check_full_pyspark()
    java = find_java()
    if not port_is_free(port, host):
        raise ServerStartError("SPARK_CDC_LOCAL_SERVER.PORT_IN_USE", port=port, host=host)
    settings = {
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.driver.bindAddress": host,
        "spark.driver.host": host,
        # Two per core, not Spark's 200: each is a state-store task in every micro-batch of a
        # stateful stream (``spark_cdc.state_partitions``), on a server that runs local[*].
        SHUFFLE_PARTITIONS: str(PER_TASK_SLOT * len(os.sched_getaffinity(0))),
        # Filters reach Python data sources (4.1+; 4.0 ignores the name): the change feeds
        # use them, where no plan cache hands one query's pushed read to another
        # (``server_plugin.changefeed.pushdown``).
        PUSHDOWN: "true",
        PLAN_CACHE_SIZE: "0",
        **(conf or {}),
    }
    if shared_python_workers:
        plugins = [settings.get("spark.plugins", ""), shared_workers_server.PLUGIN]
        settings.update(shared_workers_server.SETTINGS)
        settings["spark.plugins"] = ",".join(p for p in dict.fromkeys(plugins) if p)
    scratch = None if log_path else Path(tempfile.mkdtemp(prefix="spark-cdc-server-"))
    log_path = Path(log_path or scratch / "server.log")  # type: ignore[operator]
    log4j = log_path.with_name("log4j2.properties")
    log4j.write_text(_LOG4J2)
    command = [str(spark_home / "bin" / "spark-submit"), "--driver-memory", driver_memory]
    # spark-submit lets --driver-java-options replace spark.driver.extraJavaOptions: merge them.
    java_options = f"-Dlog4j2.configurationFile=file:{log4j}"
    java_options += " " + settings.pop("spark.driver.extraJavaOptions", "")
    command += ["--driver-java-options", java_options.strip()]
    if not shared_python_workers:
        command += ["--class", SERVER_CLASS]
    command += ["--name", "spark-cdc-connect"]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    command.append(shared_workers_server.__file__ if shared_python_workers else "spark-internal")

    # A client's SPARK_REMOTE would make spark-submit look for a remote instead of starting
    # the server class (measured: "Failed to load class ... SparkConnectServer").
    env = {k: v for k, v in os.environ.items() if k not in (*_CLIENT_ONLY_ENV, TOKEN_ENV)}
    if token:  # read by the server itself; a --conf would show it to every user in `ps`
        env[TOKEN_ENV] = token
    env.update(
        SPARK_HOME=str(spark_home),
        JAVA_HOME=str(Path(os.path.realpath(java)).parent.parent),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP=host,
    )
    env.pop(SAFE_ENV, None)  # declared from these settings only, never inherited
    if settings[PUSHDOWN] == "true" and int(settings[PLAN_CACHE_SIZE]) <= 0:
        env[SAFE_ENV] = "true"
    discovery = _discovery_path(log_path.parent) if discover else []
    python_path = [*(extra_python_path or []), *discovery]
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join([*python_path, env.get("PYTHONPATH", "")])
    log: IO[bytes] = open(log_path, "wb")  # noqa: SIM115 - owned by the child process
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE if token else log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    if token:
        copier = threading.Thread(
            target=_copy_masked, args=(process.stdout, log, token.encode()), daemon=True
        )
        copier.start()
    else:
        log.close()
    server = LocalServer(port, host, log_path, process, token, scratch)
    server.watchdog = Watchdog(process.pid, scratch or orphans_folder)
    if idle_daemon_seconds is not None:
        server.reaper = IdleDaemonReaper(process.pid, idle_daemon_seconds)
        server.reaper.start()
    RUNNING.add(server)
    try:
        _wait_until_ready(server, timeout)
    except BaseException as error:  # a failed start, or Ctrl-C: never leave it running
        if isinstance(error, ServerStartError):
            server.scratch = None  # the error names the log: it stays for the diagnosis
        server.stop(timeout=10)
        raise
    return server


def _copy_masked(output: IO[bytes], log: IO[bytes], token: bytes) -> None:
    """The server's output into its log, the token masked: Spark's foreachBatch worker
    prints its session URL, token and all (measured on 4.3)."""
    with log:
        for line in output:
            log.write(line.replace(token, b"***"))
            log.flush()


def _discovery_path(folder: Path) -> list[str]:
    """Spark finds server-side Python data sources with ``pkgutil.iter_modules()``, which
    sees only folders on the server's ``sys.path``. An editable install (or a checkout on
    the client's path) serves our discovery module from elsewhere, so the server then gets a
    folder holding a copy of it."""
    specs = [importlib.util.find_spec(name) for name in DISCOVERY_MODULES]
    origins = [Path(spec.origin) for spec in specs if spec is not None and spec.origin]
    installed = {Path(p) for p in site.getsitepackages()}
    elsewhere = [origin for origin in origins if origin.parent not in installed]
    if not elsewhere:
        return []
    target = folder / "discovery"
    target.mkdir(exist_ok=True)
    for origin in elsewhere:
        shutil.copy(origin, target)
    return [str(target)]


def _wait_until_ready(server: LocalServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.alive():
            raise ServerStartError(
                "SPARK_CDC_LOCAL_SERVER.SERVER_EXITED",
                code=server.process.returncode,
                log=server.log_path,
                tail=server.log_tail(),
            )
        if READY_LINE in server.log_path.read_text(errors="replace") and _answers(server):
            return
        time.sleep(0.5)
    raise ServerStartError(
        "SPARK_CDC_LOCAL_SERVER.START_TIMEOUT",
        timeout=f"{timeout:.0f}",
        log=server.log_path,
        tail=server.log_tail(),
    )


def _answers(server: LocalServer) -> bool:
    try:
        with socket.create_connection((server.host, server.port), timeout=2):
            return True
    except OSError:
        return False
