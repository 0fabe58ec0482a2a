"""A user's own script against a server that is not there or refuses its token: told in
seconds, with a condition and the fix, and a good session after a refused one works.

Each case runs in a fresh Python process: what it checks (PySpark's first session, its
column functions' one-time setting) is per process.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import write_deltalake
from spark_cdc.testing.local_server import free_port, start_local_server

from tests.support import harness
from tests.support.delta_tables import rows

TOKEN = "t0ken-for-connection-tests"
pytestmark = pytest.mark.slow  # a fresh Python per case, and a server of its own


@pytest.fixture(scope="module")
def token_server() -> Iterator[str]:
    """A server that requires ``TOKEN``; its URL without the token."""
    server = start_local_server(conf=harness.TEST_SERVER_CONF, token=TOKEN)
    try:
        yield f"sc://localhost:{server.port}"
    finally:
        server.stop()


CAUGHT = """
def caught(action):
    try:
        action()
    except Exception as error:
        return f"{type(error).__name__} {error.getCondition()} {error}"
    return "no error"
"""


def run(script: str, timeout: float = 120) -> tuple[list[str], float]:
    """The lines a fresh Python prints running ``script``, and how long it took."""
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", CAUGHT + textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.splitlines(), time.monotonic() - started


@pytest.mark.local_process
def test_a_good_session_after_a_refused_one_reads_changes(
    token_server: str, tmp_path: Path
) -> None:
    """The refused session, created first, stays PySpark's active one; ChangelogReader on
    the good session used to fail with UNAUTHENTICATED anyway."""
    path = str(tmp_path / "t")
    write_deltalake(path, rows(range(3)))
    lines, _ = run(
        f"""
        from pyspark.sql import SparkSession
        from spark_cdc import ChangelogReader
        refused = SparkSession.builder.remote("{token_server}/;token=wrong").create()
        print(caught(lambda: refused.range(1).collect()))
        good = SparkSession.builder.remote("{token_server}/;token={TOKEN}").create()
        feed = ChangelogReader(good).option("rowId", "id").changes("{path}")
        print(sorted(r.id for r in feed.collect()))
        good.stop()  # PySpark hangs at exit with two sessions left open, ours or not
        refused.stop()
        """
    )
    assert lines[0].startswith("ConnectionProblem SPARK_CDC_CONNECTION.UNAUTHENTICATED ")
    assert "refused the session: wrong or missing token (Invalid authentication token)" in lines[0]
    assert TOKEN not in lines[0] and "token=wrong" not in lines[0]
    assert lines[1] == "[0, 1, 2]"


@pytest.mark.local_process
def test_connect_checks_the_token(token_server: str, tmp_path: Path) -> None:
    """``connect`` refuses a missing token at once, names it, and the next session, with
    the token from ``$SPARK_CDC_TOKEN``, works, column functions included."""
    path = str(tmp_path / "t")
    write_deltalake(path, rows(range(2)))
    lines, _ = run(
        f"""
        import os
        from spark_cdc import ChangelogReader, connect
        print(caught(lambda: connect("{token_server}")))
        os.environ["SPARK_CDC_TOKEN"] = "{TOKEN}"
        spark = connect("{token_server}")
        feed = ChangelogReader(spark).option("rowId", "id").changes("{path}")
        print(sorted(r.id for r in feed.collect()))
        spark.stop()
        """
    )
    assert lines[0].startswith("ConnectionProblem SPARK_CDC_CONNECTION.UNAUTHENTICATED "), lines
    assert "(No authentication token provided)" in lines[0]
    assert lines[1] == "[0, 1]"


def test_connect_names_an_unreachable_server_in_seconds() -> None:
    """A closed port, and a port that accepts connections but is no Spark Connect server
    (PySpark alone retried each for about twenty minutes)."""
    closed = free_port()
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(16)
    mute_port = mute.getsockname()[1]
    accepting = True

    def accept_and_drop() -> None:
        while accepting:
            try:
                conn, _ = mute.accept()
                conn.close()
            except OSError:
                return

    threading.Thread(target=accept_and_drop, daemon=True).start()
    try:
        lines, took = run(
            f"""
            from spark_cdc import connect
            print(caught(lambda: connect("sc://localhost:{closed}", timeout=5)))
            print(caught(lambda: connect("sc://localhost:{mute_port}", timeout=5)))
            """
        )
    finally:
        accepting = False
        mute.close()
    for line, port in zip(lines, (closed, mute_port), strict=True):
        assert line.startswith("ConnectionProblem SPARK_CDC_CONNECTION.UNREACHABLE "), lines
        assert f"localhost:{port}" in line
    assert took < 60, f"took {took:.0f}s"
