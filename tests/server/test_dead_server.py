"""A client call whose server is gone says so by name: reads, ``apply_changes``, a stream's
``awaitTermination`` and ``spark-cdc tail`` each end with ``SPARK_CDC_CONNECTION.SERVER_GONE``
naming the server's address (the command line: a non-zero exit and that one line), within
seconds when the server's port refuses connections, within the set time when something
else answers there; the session's ``stop()`` then returns at once. Made again on a server
that is back, an apply neither loses nor repeats a change (``spark_cdc.connection``)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import write_deltalake
from pyspark.sql import SparkSession
from spark_cdc import apply_changes, readStream
from spark_cdc.connection import REFUSED_FOR_S, SERVER_GONE_AFTER_S, address
from spark_cdc.connection_defaults import SERVER_GONE_AFTER_ENV

from tests.support.apply_targets import feed_changes, model_rows, read_table, sorted_rows
from tests.support.delta_tables import rows
from tests.support.harness import dedicated_session
from tests.support.processes import Command

GONE = "SPARK_CDC_CONNECTION.SERVER_GONE"
# Issue 77: a server whose port refuses connections is named within this, a call's retries,
# a thread's start and a command's exit included.
REFUSED_NAMED_WITHIN_S = 5.0
# What a call may take past a set deadline: the retry it was waiting in, a thread's start.
SLACK_S = 10.0
# ``stop()`` of a session whose server is gone: at once, a loaded machine's "at once".
STOP_WITHIN_S = 2.0


def _source(tmp_path: Path, commits: int = 3) -> str:
    path = str(tmp_path / "orders")
    write_deltalake(path, rows(range(3)))
    for step in range(commits):
        write_deltalake(path, rows([10 + step]), mode="append")
    return path


def _apply(session: Any, source: str, folder: Path) -> Any:
    feed = readStream(session).option("rowId", "id").option("startingVersion", 0).load(source)
    return apply_changes(
        feed,
        str(folder / "mirror"),
        keys=["id"],
        sequence_by="_commit_version",
        stored_as_scd_type=2,
        checkpoint_location=str(folder / "checkpoint"),
    )


def _timed(calls: dict[str, Callable[[], Any]]) -> dict[str, tuple[float, BaseException | None]]:
    """Each call on a thread of its own, all at once: seconds to its end, and what it raised."""
    ended: dict[str, tuple[float, BaseException | None]] = {}
    started = time.monotonic()

    def run(name: str, call: Callable[[], Any]) -> None:
        try:
            call()
        except BaseException as error:  # what the call raised is the result
            ended[name] = (time.monotonic() - started, error)
        else:
            ended[name] = (time.monotonic() - started, None)

    threads = [threading.Thread(target=run, args=item, daemon=True) for item in calls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(SERVER_GONE_AFTER_S * 4)
    return ended


@pytest.mark.timeout(900)
@pytest.mark.filterwarnings("ignore:StreamingQueryListenerBus Handler thread:UserWarning")
def test_each_call_on_a_killed_server_names_it_and_an_apply_made_again_is_exact(
    spark: SparkSession, tmp_path: Path, commands: list[Command]
) -> None:
    """The default wait for a host that does not answer (30 s): the refusing port is named
    long before it."""
    assert REFUSED_NAMED_WITHIN_S < SERVER_GONE_AFTER_S
    source = _source(tmp_path)
    with dedicated_session(tmp_path, "doomed") as (server, session):
        host, port = address(server.url)
        query = _apply(session, source, tmp_path)
        query.processAllAvailable()
        tail = Command("tail", source, "--row-id", "id", "--starting-version", "0", "--remote",
                       server.url)  # fmt: skip
        commands.append(tail)
        tail.wait_for("commit 1 ")
        write_deltalake(source, rows([20]), mode="append")  # applied only after the restart
        server.kill()
        codes: list[int] = []
        ended = _timed(
            {
                "read": lambda: session.read.format("delta_changelog").load(source).collect(),
                "apply_changes": lambda: apply_changes(
                    session.read.format("delta_changelog").load(source),
                    str(tmp_path / "other"),
                    keys=["id"],
                    sequence_by="_commit_version",
                ),
                "awaitTermination": query.awaitTermination,
                "tail": lambda: codes.append(tail.finish(timeout=SERVER_GONE_AFTER_S + 60)),
            }
        )
        stop_took = _stop_took(session)
    assert sorted(ended) == ["apply_changes", "awaitTermination", "read", "tail"]
    for name, (took, error) in ended.items():
        assert took <= REFUSED_NAMED_WITHIN_S, f"{name} took {took:.1f} s"
        if name == "tail":
            continue
        _assert_gone(error, host, port, name)
        assert error.getMessageParameters()["reason"] == "its port refuses connections"  # type: ignore[union-attr]
    assert stop_took <= STOP_WITHIN_S, f"stop() took {stop_took:.1f} s"
    assert len(codes) == 1 and codes[0] != 0
    said = [line for line in tail.lines if GONE in line]  # one line, the last
    assert said == [tail.lines[-1]], tail.output
    assert said[0].startswith(f"spark-cdc: [{GONE}]") and f"{host}:{port}" in said[0]
    assert "Traceback" not in tail.output

    with dedicated_session(tmp_path, "back") as (_, session):
        again = _apply(session, source, tmp_path)
        again.processAllAvailable()
        again.stop()
    got = sorted_rows(read_table(str(tmp_path / "mirror")))
    assert got == model_rows(feed_changes(spark, source), 2)


def _stop_took(session: Any) -> float:
    """Seconds ``session.stop()`` took, its ReleaseSession asked for as PySpark does."""
    started = time.monotonic()
    session.stop()
    return time.monotonic() - started


def _assert_gone(error: BaseException | None, host: str, port: int, name: str) -> None:
    assert error is not None and getattr(error, "getCondition", lambda: None)() == GONE, (
        f"{name}: {error!r}"
    )
    assert error.getMessageParameters()["host"] == host  # type: ignore[attr-defined]
    assert error.getMessageParameters()["port"] == str(port)  # type: ignore[attr-defined]


@contextlib.contextmanager
def _killed_and_answered(server: Any, port: int) -> Any:
    """Kill ``server`` and put in its place, as soon as its port is free, something that
    accepts TCP connections and closes them at once: a host that answers with no server
    behind (a proxy's, a load balancer's), not a refusal. The port refuses only for the
    moment between the two, far less than ``REFUSED_FOR_S``."""
    killing = threading.Thread(target=server.kill, daemon=True)
    killing.start()
    deadline = time.monotonic() + 60
    while True:
        try:
            listener = socket.create_server(("127.0.0.1", port))
            break
        except OSError:  # the server still holds it
            assert time.monotonic() < deadline, "the killed server's port stayed taken"
            time.sleep(0.005)
    listener.settimeout(0.2)
    done = threading.Event()

    def close_each() -> None:
        while not done.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                listener.accept()[0].close()

    answering = threading.Thread(target=close_each, daemon=True)
    answering.start()
    killing.join()
    try:
        yield
    finally:
        done.set()
        answering.join()
        listener.close()


@pytest.mark.local_process
@pytest.mark.timeout(600)
def test_the_wait_for_a_host_without_a_server_is_set_by_the_environment(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv(SERVER_GONE_AFTER_ENV, "6")
    assert REFUSED_FOR_S < 6
    with dedicated_session(tmp_path, "doomed") as (server, session):
        host, port = address(server.url)
        session.range(1).collect()
        with _killed_and_answered(server, port):
            ended = _timed({"read": lambda: session.range(3).collect()})
            stop_took = _stop_took(session)
    took, error = ended["read"]
    _assert_gone(error, host, port, "read")
    parameters = error.getMessageParameters()  # type: ignore[union-attr]
    assert parameters["reason"] == "no answer"
    assert 6 <= took <= 6 + SLACK_S, f"{took:.1f} s, {parameters}"
    assert stop_took <= STOP_WITHIN_S, f"stop() took {stop_took:.1f} s"


def test_a_wait_that_is_not_a_number_is_refused_by_name(
    monkeypatch: Any, spark_remote: str
) -> None:
    from spark_cdc.connection import ConnectionProblem

    monkeypatch.setenv(SERVER_GONE_AFTER_ENV, "soon")
    with pytest.raises(ConnectionProblem) as caught:
        SparkSession.builder.remote(spark_remote).create()
    assert caught.value.getCondition() == "SPARK_CDC_CONNECTION.INVALID_SERVER_GONE_AFTER"
    assert os.environ[SERVER_GONE_AFTER_ENV] == "soon"
