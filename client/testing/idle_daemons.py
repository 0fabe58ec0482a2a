"""Stops the Python worker daemons that a local Spark Connect server leaves behind, so that
a server this package starts does not grow with every session it ever served.

Spark starts one forking daemon per session and per kind of Python worker and keeps it
until the server stops, also after the session ended (SPARK-54055): about 120 MB each,
three per session that reads a change feed. A test suite's sessions filled 24 GiB. The
server container stops them with ``compose/reap-idle-daemons.sh``; this is the same rule
for a server started outside it (``local_server``): a daemon among the server's processes
that has had no worker for ``idle_seconds`` is stopped. Its session, if it is still alive,
gets a new one with its next Python task: Spark restarts a daemon it cannot reach.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

_DAEMON = "-m\0pyspark.daemon"  # in /proc/<pid>/cmdline, arguments are NUL-separated


class IdleDaemonReaper(threading.Thread):
    """A background thread of the process that started the server (``root``: its process
    id), looking every ``min(idle_seconds, 60)`` seconds; ``stop()`` ends it."""

    def __init__(self, root: int, idle_seconds: float) -> None:
        super().__init__(name="idle-daemon-reaper", daemon=True)
        self.root, self.idle_seconds = root, idle_seconds
        self._stopped = threading.Event()
        self._idle_since: dict[int, float] = {}

    def run(self) -> None:
        while not self._stopped.wait(min(self.idle_seconds, 60.0)):
            self.reap(time.monotonic())

    def stop(self) -> None:
        self._stopped.set()

    def reap(self, now: float) -> list[int]:
        """The daemons stopped now: those idle (no child) since ``idle_seconds`` ago."""
        parents, commands = _processes()
        children: dict[int, list[int]] = {}
        for pid, parent in parents.items():
            children.setdefault(parent, []).append(pid)
        stopped, seen = [], set()
        for pid in _descendants(self.root, children):
            parent = parents.get(pid, 0)
            if _DAEMON not in commands.get(pid, "") or _DAEMON in commands.get(parent, ""):
                continue  # not a daemon, or a daemon's forked worker (it has its command line)
            seen.add(pid)
            if children.get(pid) or pid not in self._idle_since:
                self._idle_since[pid] = now  # busy, or first seen: idle from now
            elif now - self._idle_since[pid] >= self.idle_seconds:
                try:
                    os.kill(pid, signal.SIGTERM)
                    stopped.append(pid)
                except ProcessLookupError:
                    pass
                del self._idle_since[pid]
        self._idle_since = {p: t for p, t in self._idle_since.items() if p in seen}
        return stopped


def _descendants(root: int, children: dict[int, list[int]]) -> list[int]:
    found, stack = [], list(children.get(root, []))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def _processes() -> tuple[dict[int, int], dict[int, str]]:
    """Every process's parent and command line, from ``/proc`` (none where it is absent:
    the reaper then finds nothing)."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        pid = int(entry.name)
        # The command name in stat is parenthesized and may hold spaces: split after it.
        parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
        commands[pid] = command
    return parents, commands
