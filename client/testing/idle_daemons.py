"""Stops the Python worker daemons that a local Spark Connect server leaves behind, so that
a server this package starts does not grow with every session it ever served.

Spark starts one forking daemon per session and per kind of Python worker and keeps it
until the server stops, also after the session ended (SPARK-54055): about 120 MB each,
three per session that reads a change feed. A test suite's sessions filled 24 GiB. A
daemon among the server's processes that has had no worker for ``idle_seconds`` is
stopped: for a server this package starts (``local_server``), and in the server container,
whose entry point runs this module beside its server (``python -m
spark_cdc.testing.idle_daemons ROOT SECONDS``). Its session, if it is still alive, gets a
new one with its next Python task: Spark restarts a daemon it cannot reach.

"Cannot reach" is what the reaper must guarantee: Spark keeps the stopped daemon's port and
connects there again. Another daemon that bound the freed port meanwhile answers, fails
Spark's authentication, and every later task of that session and kind of worker fails with
"Authentication failed" (no restart follows; measured on 4.3, and once in the suite's CI).
So the reaper keeps each stopped daemon's port bound, never listening: the connection is
refused, and Spark restarts the daemon on a new port (``_hold``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from pathlib import Path

_DAEMON = "-m\0pyspark.daemon"  # in /proc/<pid>/cmdline, arguments are NUL-separated
# The most ports held at once, the oldest let go first: a server's life may stop thousands of
# daemons (three a session), and the ephemeral ports are 28k. The hazard left is a session
# idle that long, used again after another daemon took its old port: left to chance.
MAX_HELD_PORTS = 4096
_LISTENING = "0A"  # a socket's state in /proc/net/tcp
# Idle this long, a daemon is stopped. Each stopped streaming query of a Python data source
# leaves a planner daemon whose worker Spark ends a minute later (measured on 4.3: one per
# query): at 600 s, thirty queries left 33 Python processes five minutes after the last,
# against 8 after the first (issue 58). A daemon stopped too early costs its session about
# a second to start another at its next Python task.
DEFAULT_IDLE_SECONDS = 120.0


class IdleDaemonReaper(threading.Thread):
    """A background thread of the process that started the server (``root``: its process
    id), looking every ``min(idle_seconds, 60)`` seconds; ``stop()`` ends it."""

    def __init__(self, root: int, idle_seconds: float) -> None:
        super().__init__(name="idle-daemon-reaper", daemon=True)
        self.root, self.idle_seconds = root, idle_seconds
        self._stopped = threading.Event()
        self._idle_since: dict[int, float] = {}
        self._held: deque[socket.socket] = deque()

    def run(self) -> None:
        while not self._stopped.wait(min(self.idle_seconds, 60.0)):
            self.reap(time.monotonic())

    def stop(self) -> None:
        self._stopped.set()
        while self._held:
            self._held.popleft().close()

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
                ports = _stop_if_childless(pid)
                if ports is not None:
                    stopped.append(pid)
                    self._hold(pid, ports)
                del self._idle_since[pid]  # stopped, or busy after all: idle from now
        self._idle_since = {p: t for p, t in self._idle_since.items() if p in seen}
        return stopped

    def _hold(self, pid: int, ports: list[tuple[str, int]]) -> None:
        """``ports`` (the stopped daemon ``pid``'s) bound and never listened on, once it has
        exited (within moments: an idle daemon only closes its socket)."""
        deadline = time.monotonic() + 10
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        for host, port in ports:
            held = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            # Past connections' TIME_WAIT would refuse the bind; it refuses nobody else's.
            held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                held.bind((host, port))
            except OSError:  # taken already: nothing left to hold
                held.close()
                continue
            self._held.append(held)
            while len(self._held) > MAX_HELD_PORTS:
                self._held.popleft().close()


def _stop_if_childless(pid: int) -> list[tuple[str, int]] | None:
    """Daemon ``pid`` stopped (SIGTERM) if it has no worker, and the ports it listened on;
    None if it has one, or is gone.

    The reaper's listing may be late: meanwhile Spark may have had the daemon fork a worker,
    and pooled it once its task ended. Stopping the daemon then ends the worker too (it
    signals its process group), and Spark's next task, handed the dead worker from its pool,
    tells the gone daemon to stop it and fails ("java.io.IOException: Stream closed",
    measured on 4.3; once in CI). So the daemon is frozen first (SIGSTOP: a stopped process
    forks nothing) and its workers are counted while it cannot start one. A connection
    Spark makes meanwhile waits unaccepted; the daemon's end resets it, and Spark starts a
    new daemon, as it does for a refused one."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return None
    try:
        deadline = time.monotonic() + 10
        while (state := _state(pid)) not in ("T", "Z", None) and time.monotonic() < deadline:
            time.sleep(0.01)  # SIGSTOP arrives asynchronously
        if state != "T" or _has_children(pid):
            return None
        ports = listening_ports(pid)
        os.kill(pid, signal.SIGTERM)  # handled once it runs again, below
        return ports
    except ProcessLookupError:
        return None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def _has_children(pid: int) -> bool:
    """Whether ``pid`` has a child process, from ``/proc/<pid>/task/*/children``; true where
    that cannot be read (a kernel without it): a daemon is kept when in doubt."""
    try:
        return any(
            (task / "children").read_text().strip() for task in Path(f"/proc/{pid}/task").iterdir()
        )
    except OSError:
        return True


def listening_ports(pid: int) -> list[tuple[str, int]]:
    """The TCP addresses process ``pid`` listens on (a Python daemon: one, on loopback),
    from its sockets in ``/proc`` (none where that cannot be read)."""
    links = []
    with contextlib.suppress(OSError):
        for fd in list(Path(f"/proc/{pid}/fd").iterdir()):
            with contextlib.suppress(OSError):  # closed meanwhile (the listing's own, too)
                links.append(os.readlink(fd))
    inodes = {link[len("socket:[") : -1] for link in links if link.startswith("socket:[")}
    found = []
    for table, host in (("tcp", "127.0.0.1"), ("tcp6", "::1")):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == _LISTENING and fields[9] in inodes:
                    found.append((host, int(fields[1].rsplit(":", 1)[1], 16)))
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie, exited and not yet waited for by its parent,
    has closed its sockets)."""
    return _state(pid) not in ("Z", None)


def _state(pid: int) -> str | None:
    """Process ``pid``'s state letter (R, S, T stopped, Z zombie, ...); None once it is gone."""
    try:
        return _stat_fields(Path(f"/proc/{pid}/stat").read_text())[0]
    except OSError:
        return None


def _stat_fields(stat: str) -> list[str]:
    """The fields of a ``/proc/<pid>/stat`` after the command name (state, parent, ...): the
    name is parenthesized and may hold spaces, so the split starts after it."""
    return stat.rsplit(")", 1)[1].split()


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
        parents[pid] = int(_stat_fields(stat)[1])
        commands[pid] = command
    return parents, commands


def main(argv: list[str]) -> None:
    """``python -m spark_cdc.testing.idle_daemons ROOT SECONDS``: the daemons under process
    ``ROOT`` idle for ``SECONDS`` (0: never) reaped, in the foreground."""
    root, seconds = int(argv[0]), float(argv[1])
    if seconds > 0:
        IdleDaemonReaper(root, seconds).run()


if __name__ == "__main__":
    main(sys.argv[1:])
