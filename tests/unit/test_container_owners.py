"""Which test container is an orphan (``spark_cdc.testing.owners``): only one whose owner is
provably gone; what cannot be told (another PID namespace, another boot, another host, an
older label) is kept. The rule CI's two workers and any other run on one Docker engine
rely on: a server still in use is never removed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from spark_cdc.testing.owners import owner_gone, owner_label

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="start times and namespaces come from /proc"
)


def _ended() -> str:
    """The owner label of a process that has ended."""
    process = subprocess.Popen(["sleep", "60"])
    label = owner_label(process.pid)
    process.kill()
    process.wait()
    return label


def _with(label: str, place: int, value: str) -> str:
    parts = label.split(":")
    parts[place] = value
    return ":".join(parts)


def test_a_running_owner_keeps_its_container() -> None:
    assert owner_gone(owner_label()) is False
    assert owner_gone(owner_label(os.getppid())) is False


def test_an_ended_owner_leaves_an_orphan() -> None:
    assert owner_gone(_ended()) is True


@linux_only
def test_a_pid_taken_again_by_another_process_is_no_owner() -> None:
    """The label's start time is not the running process's: the owner ended, its pid was
    given to another process."""
    label = owner_label()
    started = int(label.split(":")[4])
    assert owner_gone(_with(label, 4, str(started + 1))) is True


@linux_only
@pytest.mark.parametrize(
    ("place", "value"),
    [(0, "another-host"), (1, "0" * 32), (2, "4026531999")],
    ids=["host", "boot", "pid-namespace"],
)
def test_an_owner_this_process_cannot_see_is_never_judged_gone(place: int, value: str) -> None:
    """Another run on the same Docker engine, in another PID namespace (a sandboxed CI), on
    another host or before a reboot: its pid means nothing here, so its container stays."""
    label = _ended()
    assert label.split(":")[place] != value
    assert owner_gone(_with(label, place, value)) is False


def test_a_label_of_another_format_is_kept() -> None:
    """An older version's ``host:pid`` label, or anything else: not ours to judge."""
    ended = _ended().split(":")
    assert owner_gone(f"{ended[0]}:{ended[3]}") is False
    assert owner_gone("") is False
