"""Which process started a test container, and whether it is provably gone.

A test run labels each container it starts with its owner, and the next start removes the
containers whose owner is gone: a run killed before its teardown must not leave a server
running. A label of host and pid alone can misjudge two ways. A second run on the same
Docker engine in another PID namespace (a sandboxed CI beside another run, both with the
same hostname) finds no process of that pid and removes a server still in use: this is the
one path of ours that removes a container, and a CI run once lost one worker's server
mid-run, every later test failing on "No such container". And a pid taken again after a
crash makes an orphan look alive. So the label names the process fully (host, boot, PID
namespace, pid and the process's start time), and a container is an orphan only when the
first three are this process's own and no process of that pid started at that time: what
cannot be told is kept.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

LABEL = "org.spark-cdc-connect.owner"


def owner_label(pid: int | None = None) -> str:
    """The label naming ``pid`` (this process by default) as a container's owner."""
    pid = os.getpid() if pid is None else pid
    return ":".join((socket.gethostname(), _boot(), _pid_namespace(), str(pid), _started(pid)))


def owner_gone(label: str) -> bool:
    """True only when the owner ``label`` names ran where this process runs and has ended."""
    parts = label.split(":")
    if len(parts) != 5 or not parts[3].isdigit():
        return False  # another format (an older version's): not ours to judge
    host, boot, namespace, pid, started = parts
    if (host, boot, namespace) != (socket.gethostname(), _boot(), _pid_namespace()):
        return False
    if started:
        return _started(int(pid)) != started  # gone, or the pid is another process's now
    return not _alive(int(pid))  # no /proc (macOS): the pid is all there is


def _boot() -> str:
    return _read("/proc/sys/kernel/random/boot_id").replace("-", "")


def _pid_namespace() -> str:
    try:  # "pid:[4026531836]"
        return os.readlink("/proc/self/ns/pid").strip("pid:[]")
    except OSError:
        return ""


def _started(pid: int) -> str:
    """The process's start time in clock ticks after boot (/proc/PID/stat's 22nd field;
    the command name before it may hold spaces and parentheses), "" when there is none."""
    stat = _read(f"/proc/{pid}/stat")
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
