"""How a ``spark-cdc`` command ends: stop signals, the command's temporary folder, and
the errors that end it.

Ctrl-C, SIGTERM and SIGHUP stop every command the same way, in bounded time: the stream is
stopped (and when it does not stop within ``STOP_DEADLINE_S``, its session is closed, which
ends it on the server), a server the command started is stopped with its whole process
group, and temporary folders are removed. A second signal while that runs skips to the end:
the server's process group is killed at once.

The bottom of ``spark_cdc.cli``: it imports nothing of the command line; ``commands``,
``demo`` and ``main`` import it.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from spark_cdc.server_plugin.conditions import ConditionError

STOP_DEADLINE_S = 20.0  # for the stream's stop, then again for the session's
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class CliError(ConditionError):
    """Ends the command with this one sentence: a condition of the registry
    (``spark_cdc.server_plugin.conditions``)."""

    @classmethod
    def of(cls, error: Any) -> CliError:
        """Another error of ours (``condition``, ``parameters``), ending the command with the
        first line of its message."""
        made = cls(error.condition, **error.parameters)
        made.args = (str(made).splitlines()[0],)
        return made


SERVER_GONE = "SPARK_CDC_CONNECTION.SERVER_GONE"


def server_gone(error: BaseException) -> bool:
    """Whether ``error`` says the session's server is gone (``spark_cdc.connection``): then
    nothing is stopped or released on it, which would only wait for it again."""
    condition = getattr(error, "getCondition", None)
    return callable(condition) and condition() == SERVER_GONE


class Stopped(BaseException):
    """A stop signal arrived. A BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` on the way swallows it; every ``finally`` runs."""


_stop_requested = threading.Event()
_deferring = 0  # how many ``stop_deferred`` blocks the main thread is in


def stop_requested() -> bool:
    """Whether a stop signal arrived: an error after it (a call it interrupted failing) is
    the stop, not news."""
    return _stop_requested.is_set()


@contextmanager
def stop_deferred() -> Iterator[None]:
    """Inside, a first stop signal is recorded, and raised as ``Stopped`` when the block
    ends. A signal handler's exception lands wherever the main thread is: inside a gRPC
    call it can leave the client's locks half released (seen: ``spark-cdc apply`` ending
    with "release unlocked lock" and exit 1). Blocks are short calls of a loop that waits
    between them, where ``Stopped`` is raised at once."""
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
    if _stop_requested.is_set() and not _deferring:
        raise Stopped(signal.SIGTERM)


def catch_stop_signals() -> None:
    """From here on the first stop signal raises ``Stopped``; a second one ends the process
    at once (``_second_signal``). A stop signal the command was started with ignored stays
    ignored, as Unix tools leave it: ``nohup spark-cdc tail ...`` keeps running when its
    terminal closes, and a shell's background job is not stopped by Ctrl-C."""
    for stop_signal in _caught():
        signal.signal(stop_signal, _first_signal)


def _caught() -> list[signal.Signals]:
    return [s for s in STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN]


def _first_signal(signum: int, frame: FrameType | None) -> None:
    for stop_signal in _caught():
        signal.signal(stop_signal, _second_signal)
    # While the session closes, gRPC's own threads may still be reading from it and fail
    # (seen in CI: a traceback from a gRPC thread after Ctrl-C on a loaded machine). The
    # user asked to stop; what threads say from here on is not news.
    threading.excepthook = lambda args: None
    _stop_requested.set()
    if not _deferring:
        raise Stopped(signum)


def _second_signal(signum: int, frame: FrameType | None) -> None:
    from spark_cdc.testing.local_server import RUNNING

    for server in list(RUNNING):
        server.kill()
    remove_scratch()
    sys.stderr.write("\nStopped at once.\n")
    os._exit(0)


def quiet_grpc(environ: dict[str, str] | Any = os.environ) -> None:
    """gRPC's C core logs to stderr on its own; the command says what went wrong in its own
    sentence, so those lines are off unless the user sets ``GRPC_VERBOSITY``, read once, when
    gRPC starts, so this runs before anything imports it. It does not silence gRPC's aborts:
    ``Epoll1Poller ... epoll_wait error: Bad file descriptor``, seen twice in the test matrix
    as a line ahead of ``tail``'s sentence, is one (grpc/grpc #43055)."""
    environ.setdefault("GRPC_VERBOSITY", "NONE")


_scratch: list[Path] = []


def scratch() -> Path:
    """The command's own temporary folder (a server's log, the live feed's spool, the
    demo's table), removed when the command ends, after any server it started has stopped,
    so nothing a late write recreates is left behind."""
    if not _scratch:
        _scratch.append(Path(tempfile.mkdtemp(prefix="spark-cdc-")))
    return _scratch[0]


def remove_scratch(keep_server_log: bool = False) -> None:
    """Remove the command's folder; after a failure, keep a server log it holds (and say
    where) for the diagnosis."""
    while _scratch:
        folder = _scratch.pop()
        log = folder / "server.log"
        if keep_server_log and log.exists():
            for entry in folder.iterdir():
                if entry.name not in (log.name, "log4j2.properties"):
                    shutil.rmtree(entry, ignore_errors=True)
            print(f"spark-cdc: the server's log is kept in {log}", file=sys.stderr)
        else:
            _remove_settled(folder)


def _remove_settled(folder: Path, within_s: float = 5.0) -> None:
    """Remove ``folder``, again while something still writes into it: a micro-batch the
    server was writing when the stream stopped can land a moment later (seen in tests)."""
    deadline = time.monotonic() + within_s
    shutil.rmtree(folder, ignore_errors=True)
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.25)
        shutil.rmtree(folder, ignore_errors=True)
