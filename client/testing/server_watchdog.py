"""Stops a local server once the process that started it is gone, however that ended.

``local_server`` runs this file beside every server it starts, as a script of the standard
library alone (it imports neither this package nor PySpark): ``python -I -S
server_watchdog.py GROUP [FOLDER]``. It reads its standard input, a pipe whose one writer is
the process that started the server, until the end of the file. That comes when the starter
closes the pipe (it stopped the server itself, and wrote ``RELEASED`` first) or when the
kernel closes it because the starter ended, SIGKILL and the OOM killer included, which no
handler of the starter's sees. Then the server's process group (the JVM and its Python
workers) gets SIGTERM, so that Spark's shutdown hooks run, and SIGKILL ``GRACE_S`` later;
and when the starter ended without a word, the temporary FOLDER it left (the server's log
in it) is removed once the group is gone, as the starter would have done (issue 77: a
killed ``spark-cdc serve`` left its folder behind).

Why not Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)``): it is sent when the
*thread* that started the child ends, not its process (a server started from a worker
thread would die with that thread), and setting it needs ``preexec_fn``, which makes Python
fork instead of vfork in a process whose gRPC threads may be running (grpc/grpc #43055,
tests/support/processes.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time

GRACE_S = 10.0
RELEASED = b"released"  # what the starter writes when it stopped the server itself


def _gone(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return True
    return False


def _wait_gone(group: int, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not _gone(group) and time.monotonic() < deadline:
        time.sleep(0.2)


def main(argv: list[str]) -> None:
    group, folder = int(argv[0]), argv[1] if len(argv) > 1 else None
    said = b""
    while chunk := sys.stdin.buffer.read(4096):  # waits for the end of the file
        said += chunk
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    _wait_gone(group, GRACE_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
    if folder is not None and said != RELEASED:  # the starter is gone: nobody else will
        _wait_gone(group, GRACE_S)  # nothing of the server writes into it any more
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
