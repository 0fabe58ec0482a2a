"""``spark-cdc`` with no harness server: ``serve`` with its own server and its token (where
the token comes from, that no log or command line shows it, one sentence when it is wrong),
gRPC's logs kept quiet, and the commands that start a server refusing, before any JVM starts,
to run without deltalake. Real processes, as a user runs them."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import write_deltalake
from pyspark.sql import SparkSession
from spark_cdc.cli.lifecycle import CliError, quiet_grpc
from spark_cdc.cli.main import explain, masked
from spark_cdc.testing.local_server import free_port

from tests.support.delta_tables import rows
from tests.support.processes import Command, command_lines_holding, without

TOKEN = "s3cret-t0ken-for-tests"


@pytest.fixture(scope="module", params=[(), ("--shared-python-workers",)], ids=["", "shared"])
def served(request: pytest.FixtureRequest) -> Iterator[tuple[int, Command]]:
    """``serve`` as Spark starts its server, and with sessions sharing Python workers."""
    port = free_port()
    command = Command("serve", "--port", str(port), *request.param, env={"SPARK_CDC_TOKEN": TOKEN})
    try:
        command.wait_for("Connect with:")
        yield port, command
    finally:
        if command.process.poll() is None:
            command.interrupt()


@pytest.mark.local_process
def test_serve_needs_the_token_and_stops_on_ctrl_c(served: tuple[int, Command]) -> None:
    port, command = served
    with_token = SparkSession.builder.remote(f"sc://localhost:{port}/;token={TOKEN}").create()
    try:
        assert with_token.range(5).count() == 5
        # Spark's foreachBatch worker prints its session URL, token and all, to the log.
        stream = with_token.readStream.format("rate").load().writeStream
        query = stream.foreachBatch(lambda batch, batch_id: None).start()
        query.processAllAvailable()
        query.stop()
    finally:
        with_token.stop()
    for url in (f"sc://localhost:{port}", f"sc://localhost:{port}/;token=wrong"):
        refused = SparkSession.builder.remote(url).create()
        try:
            with pytest.raises(Exception, match=r"(?i)unauthenticated|token|authentication"):
                refused.range(1).collect()
        finally:
            refused.stop()
    assert f"sc://localhost:{port}/;token=<your token>" in command.output
    assert not command_lines_holding(TOKEN)
    log = re.search(r"log: (\S+)\)", command.output)
    assert log is not None
    logged = Path(log.group(1)).read_text()
    assert TOKEN not in logged
    if "ForeachBatch worker is starting" in logged:  # it prints the URL (4.3)
        assert "token=***" in logged
    assert command.interrupt() == 0
    assert TOKEN not in command.output
    assert not Path(log.group(1)).parent.exists(), "serve left its folder behind"
    assert not command_lines_holding(f"binding.port={port}"), "serve left its server behind"


@pytest.mark.local_process
def test_wrong_token_is_one_sentence_without_the_token(tmp_path: Path) -> None:
    """A token from --token-file reaches the server and no command line; a tail with the
    wrong one is refused in one sentence."""
    port = free_port()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    server = Command("serve", "--port", str(port), "--token-file", str(token_file))
    try:
        server.wait_for("Connect with:")
        assert "token=<your token>" in server.output
        assert not command_lines_holding(TOKEN)
        path = str(tmp_path / "t")
        write_deltalake(path, rows(range(2)))
        tail = Command(
            "tail",
            path,
            "--row-id",
            "id",
            "--remote",
            f"sc://localhost:{port}",
            env={"SPARK_CDC_TOKEN": "not-" + TOKEN},
        )
        assert tail.finish() == 1
        assert tail.lines == [
            "spark-cdc: [SPARK_CDC_CLI.UNAUTHENTICATED] The server refused the connection: "
            "wrong or missing token; give the server's token with $SPARK_CDC_TOKEN or "
            "--token-file."
        ]
    finally:
        assert server.interrupt() == 0
    assert TOKEN not in server.output


@pytest.mark.plan_only
def test_grpc_core_logs_are_off_unless_the_user_asks_for_them() -> None:
    environ: dict[str, str] = {}
    quiet_grpc(environ)
    assert environ == {"GRPC_VERBOSITY": "NONE"}
    chosen = {"GRPC_VERBOSITY": "DEBUG"}
    quiet_grpc(chosen)
    assert chosen == {"GRPC_VERBOSITY": "DEBUG"}


@pytest.mark.plan_only
def test_the_token_comes_from_a_file_stdin_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from spark_cdc.cli.lifecycle import CliError
    from spark_cdc.cli.main import _parser, _token

    def token(*args: str) -> str | None:
        return _token(_parser().parse_args(["serve", *args]))

    monkeypatch.setenv("SPARK_CDC_TOKEN", "from-env")
    assert token() == "from-env"
    assert token("--token", "given") == "given"
    file = tmp_path / "token"
    file.write_text("from-file\nsecond line ignored\n")
    assert token("--token-file", str(file)) == "from-file"
    monkeypatch.setattr("sys.stdin", io.StringIO("from-stdin\n"))
    assert token("--token-file", "-") == "from-stdin"
    monkeypatch.delenv("SPARK_CDC_TOKEN")
    assert token() is None
    file.write_text("\n")
    with pytest.raises(CliError, match="is empty; put the token on its first line"):
        token("--token-file", str(file))
    with pytest.raises(CliError, match=r"Cannot read the token file .*No such file"):
        token("--token-file", str(tmp_path / "missing"))
    with pytest.raises(SystemExit):  # one or the other
        token("--token", "a", "--token-file", str(file))


@pytest.mark.slow  # a fresh spark-cdc process per command
@pytest.mark.parametrize(
    "args",
    [["serve", "--port", "{free}"], ["demo"], ["tail", "/t", "--row-id", "id"]],
    ids=["serve", "demo", "tail"],
)
def test_commands_that_start_a_server_refuse_without_deltalake(
    tmp_path: Path, args: list[str]
) -> None:
    """Named, with the exact pip command for this Python, before any JVM starts."""
    filled = [a.format(free=free_port()) for a in args]
    started = time.monotonic()
    command = Command(*filled, env=without("deltalake", tmp_path / "shadow"))
    assert command.finish(timeout=60) == 1
    assert time.monotonic() - started < 30  # a server would take longer to start
    assert len(command.lines) == 1, command.output
    line = command.lines[0]
    assert line.startswith("spark-cdc: [DELTA_CHANGELOG.MISSING_DEPENDENCY] This Python"), line
    assert f"`{sys.executable} -m pip install 'deltalake>=1.4.2'`" in line
    assert "Starting a local Spark Connect server" not in command.output


# What Spark 4.2 sent `spark-cdc tail` from a client on another Python than the server's,
# before the sources ran the server's own code: a Python traceback after Spark's sentence.
_WORKER_FAILURE = """[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: \
Traceback (most recent call last):
  File "/opt/spark/python/pyspark/sql/worker/create_data_source.py", line 70, in main
    check_python_version(infile)
  File "/opt/spark/python/pyspark/worker_util.py", line 79, in check_python_version
    raise PySparkRuntimeError(
pyspark.errors.exceptions.base.PySparkRuntimeError: [PYTHON_VERSION_MISMATCH] Python in worker \
has different version: 3.11 than that in driver: 3.12, PySpark cannot run with different minor \
versions.
\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:1)
"""


def test_a_server_side_python_failure_is_said_with_its_cause() -> None:

    assert explain(RuntimeError(_WORKER_FAILURE)) == (
        "[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: "
        "pyspark.errors.exceptions.base.PySparkRuntimeError: [PYTHON_VERSION_MISMATCH] Python "
        "in worker has different version: 3.11 than that in driver: 3.12, PySpark cannot run "
        "with different minor versions."
    )
    assert explain(RuntimeError("[X] one line\nmore")) == "[X] one line"


@pytest.mark.plan_only
def test_the_token_is_masked_as_a_value_not_as_a_word() -> None:
    """A token that is also a word of our sentences leaves them whole; where a value the
    sentence quotes (a parameter, Spark's text) holds it, it is masked."""
    refused = explain(RuntimeError("UNAUTHENTICATED: bad token"), token="wrong")
    assert refused == str(CliError("SPARK_CDC_CLI.UNAUTHENTICATED"))
    assert "wrong or missing token" in refused
    quoted = masked(CliError("SPARK_CDC_CLI.TOKEN_FILE_EMPTY", file="/keys/wrong"), "wrong")
    assert quoted.getMessageParameters() == {"file": "/keys/***"}
    assert str(quoted).startswith("[SPARK_CDC_CLI.TOKEN_FILE_EMPTY] ")
    spark_text = explain(RuntimeError("[X] session sc://h:1/;token=s3cret failed"), "s3cret")
    assert spark_text == "[X] session sc://h:1/;token=*** failed"


def test_version_is_ours_and_needs_no_server() -> None:
    """``--version`` beside the commands (not an argparse error asking for one); a
    ``--version`` of a command (apply-snapshot's) stays that command's."""
    from importlib.metadata import version

    command = Command("--version")
    assert command.finish() == 0, command.output
    assert re.fullmatch(
        rf"spark-cdc {re.escape(version('spark-cdc-connect'))} \(PySpark [\d.]+\w*, "
        rf"Python {sys.version_info[0]}\.{sys.version_info[1]}\.\d+\)",
        command.output.strip(),
    ), command.output
    snapshot = Command("apply-snapshot", "t", "--version", "3")
    assert snapshot.finish() == 2 and "--target" in snapshot.output, snapshot.output
