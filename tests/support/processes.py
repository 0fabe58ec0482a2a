"""Processes a test starts as a user would: ``python -m spark_cdc ...`` with its output
collected line by line, what every process on the machine shows on its command line, and an
environment whose Python lacks a package."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


class Command:
    """``python -m spark_cdc ...`` (``under`` a launcher such as ``nohup`` if given; ``python``
    another interpreter than this one, such as a thin client's) with its
    output collected line by line, and its own
    ``TMPDIR`` (``tmp``), so that what it leaves there is its own and not another process's
    on the same machine."""

    def __init__(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        under: tuple[str, ...] = (),
        python: str | Path = sys.executable,
    ) -> None:
        self.lines: list[str] = []
        # Removed with this object (or at exit), whether or not a fixture tracks the command.
        self._tmp = tempfile.TemporaryDirectory(prefix="cdc-command-", ignore_cleanup_errors=True)
        self.tmp = Path(self._tmp.name)
        # A token in a --remote URL (the container harness's) must never be printed.
        self.secrets = [m for a in args for m in re.findall(r";token=([^;/]+)", a)]
        self.process = subprocess.Popen(
            [*under, str(python), "-m", "spark_cdc", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "TMPDIR": str(self.tmp), **(env or {})},
            # No preexec_fn: it makes Python fork instead of vfork, and gRPC's fork handler
            # in a child of a process with a live channel (this one's Spark session) can
            # abort it before exec (grpc/grpc #43055; seen in CI as exit -6). The signal
            # dispositions a command starts with are set in the harness (tests/conftest.py).
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if self.process.poll() is not None and not self._reader.is_alive():
                raise AssertionError(
                    f"exited {self.process.returncode} before {text!r}:\n{self.output}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} within {timeout}s:\n{self.output}")
            time.sleep(0.2)

    def interrupt(self, timeout: float = 120) -> int:
        """Ctrl-C, as a terminal sends it."""
        os.killpg(self.process.pid, signal.SIGINT)
        return self.finish(timeout)

    def finish(self, timeout: float = 300) -> int:
        code = self.process.wait(timeout)
        self._reader.join(10)
        for secret in self.secrets:
            assert secret not in self.output, "the command printed its token"
        return code


def command_lines_holding(secret: str) -> list[str]:
    """The command line of every process on this machine that shows ``secret``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process ended meanwhile
            continue
        if secret in text:
            found.append(text)
    return found


def without(package: str, folder: Path) -> dict[str, str]:
    """An environment whose Python cannot import ``package``: a folder ahead of
    site-packages holds a module of that name that fails as a missing one does."""
    shadow = folder / package
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        f"raise ModuleNotFoundError(\"No module named '{package}'\", name='{package}')\n"
    )
    return {"PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}


def python_processes_below(root: int) -> tuple[int, int]:
    """How many Python processes run below process ``root`` (a server's workers and
    daemons), and their resident memory in bytes, from ``/proc``."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    count, rss, todo = 0, 0, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            if b"python" in Path(f"/proc/{pid}/cmdline").read_bytes():
                rss += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * 4096
                count += 1
        except (OSError, ValueError):
            continue
    return count, rss


def streams_come_and_go(session: Any, source: str, count: int, root: int) -> tuple[Any, Any]:
    """``count`` streaming queries of ``source``'s change feed (update detection, into the
    ``noop`` sink), each started, drained and stopped in turn, on the server of process
    ``root``: its Python processes (``python_processes_below``) after the first and the last."""
    from spark_cdc import readStream

    def one_stream() -> None:
        feed = readStream(session).option("rowId", "id").option("startingVersion", 0)
        query = feed.load(source).writeStream.format("noop").start()
        query.processAllAvailable()
        query.stop()

    one_stream()
    first = python_processes_below(root)
    for _ in range(count - 1):
        one_stream()
    return first, python_processes_below(root)
