"""``spark-cdc`` end to end, as a user runs it: real processes, a real server, real tables."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession
from spark_cdc.cli.main import quiet_grpc
from spark_cdc.testing.local_server import free_port

from tests.support.delta_tables import rows

TOKEN = "s3cret-t0ken-for-tests"


class Command:
    """``python -m spark_cdc ...`` with its output collected line by line."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.lines: list[str] = []
        # A token in a --remote URL (the container harness's) must never be printed.
        self.secrets = [m for a in args for m in re.findall(r";token=([^;/]+)", a)]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "spark_cdc", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            # As from a terminal: a runner that starts us in the background (SIGINT ignored,
            # which children inherit) must not make Ctrl-C a no-op for the command.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
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


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[int, Command]]:
    port = free_port()
    command = Command("serve", "--port", str(port), env={"SPARK_CDC_TOKEN": TOKEN})
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
            "spark-cdc: The server refused the connection: wrong or missing token "
            "(set $SPARK_CDC_TOKEN or --token-file)."
        ]
    finally:
        assert server.interrupt() == 0
    assert TOKEN not in server.output


def test_tail_follows_a_table_being_written(spark_remote: str, tmp_path: Path) -> None:
    path = str(tmp_path / "orders")
    write_deltalake(path, rows(range(3)))
    tail = Command("tail", path, "--row-id", "id", "--remote", spark_remote)
    try:
        tail.wait_for("commit 0 ")
        DeltaTable(path).update({"amount": "-1.0"}, predicate="id = 1")
        write_deltalake(path, rows([7]), mode="append")
        tail.wait_for("commit 2 ")
    finally:
        code = tail.interrupt()
    assert code == 0, tail.output
    text = tail.output
    assert "update_preimage" in text and "update_postimage" in text
    commit_1 = text[text.index("commit 1 ") : text.index("commit 2 ")]
    assert commit_1.count("update_") == 2 and " insert " not in commit_1  # carry-overs gone
    assert "Traceback" not in text


def test_tail_prints_the_first_commit_after_a_quiet_spell(
    spark_remote: str, tmp_path: Path
) -> None:
    """After 10 s without data (Spark's default idle-progress interval) Spark reports the
    next batch id before that batch runs; the first commit after such a pause was lost."""
    path = str(tmp_path / "orders")
    write_deltalake(path, rows(range(3)))
    tail = Command("tail", path, "--row-id", "id", "--remote", spark_remote)
    try:
        tail.wait_for("commit 0 ")
        for i, gap in enumerate([12, 2, 12]):
            time.sleep(gap)
            write_deltalake(path, rows([10 + i]), mode="append")
        tail.wait_for("commit 3 ", timeout=60)
        time.sleep(1)  # nothing more may come
    finally:
        assert tail.interrupt() == 0, tail.output
    heads = [line.split(" at ")[0] for line in tail.lines if line.startswith("commit ")]
    assert heads == ["commit 0", "commit 1", "commit 2", "commit 3"], tail.output


def test_tail_says_what_each_commit_had_and_what_was_removed(
    spark_remote: str, tmp_path: Path
) -> None:
    """Off a terminal too: a waiting line first, then a line per commit with its raw change
    count and the carry-overs removed; a no-op UPDATE is a commit with no changes."""
    path = str(tmp_path / "orders")
    write_deltalake(path, rows(range(4)))  # v0, one file of 4 rows
    DeltaTable(path).update({"amount": "amount"}, predicate="id >= 0")  # v1: all carry-overs
    DeltaTable(path).update({"amount": "-1.0"}, predicate="id = 2")  # v2: one real update
    args = ["tail", path, "--row-id", "id", "--starting-version", "0"]
    tail = Command(*args, "--remote", spark_remote)
    try:
        tail.wait_for("commit 2 ")
    finally:
        assert tail.interrupt() == 0, tail.output
    lines = tail.lines
    assert lines[0].startswith("spark-cdc: waiting for the first commit"), tail.output
    heads = [line.split(": ", 1)[1] for line in lines if line.startswith("commit ")]
    assert heads == [
        "4 raw changes, 0 carry-overs removed, 4 changes",
        "8 raw changes, 8 carry-overs removed, no changes",
        "8 raw changes, 6 carry-overs removed, 2 changes",
    ], tail.output


def test_tail_names_a_missing_row_id_column(spark_remote: str, tmp_path: Path) -> None:
    path = str(tmp_path / "orders")
    write_deltalake(path, rows(range(2)))
    tail = Command("tail", path, "--row-id", "order_id", "--remote", spark_remote)
    assert tail.finish() == 1
    assert len(tail.lines) == 1, tail.output
    assert "--row-id names order_id" in tail.lines[0] and "id, name, amount" in tail.lines[0]
    assert "__spark_cdc" not in tail.output


def test_tail_with_net_changes(spark_remote: str, tmp_path: Path) -> None:
    path = str(tmp_path / "orders")
    write_deltalake(path, rows(range(3)))  # v0: ids 0, 1, 2
    DeltaTable(path).update({"amount": "5.0"}, predicate="id = 1")  # v1
    DeltaTable(path).update({"amount": "6.0"}, predicate="id = 1")  # v2
    DeltaTable(path).delete("id = 2")  # v3: inserted and deleted, so no net change
    args = ["tail", path, "--row-id", "id", "--starting-version", "0", "--net-changes"]
    tail = Command(*args, "--remote", spark_remote)
    try:
        tail.wait_for("commit 2 ")
        time.sleep(3)  # anything else would have come with it
    finally:
        code = tail.interrupt()
    assert code == 0, tail.output
    changes = [line.split() for line in tail.lines if line.startswith("  insert")]
    assert sorted((c[1], c[3]) for c in changes) == [("0", "0.0"), ("1", "6.0")], tail.output
    assert "update_" not in tail.output and "delete" not in tail.output


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (
            ["tail", "/no/such/table", "--row-id", "id"],
            "[DELTA_CHANGELOG.NOT_A_DELTA_TABLE] '/no/such/table' is not a Delta table",
        ),
        (["tail", "/t", "--row-id", "id", "--remote", "sc://localhost:{free}"], "Cannot reach"),
        (["serve", "--port", "{taken}"], "already in use"),
        (["serve", "--port", "{free}"], "No Java found"),
    ],
)
def test_errors_are_one_sentence_and_a_non_zero_exit(
    spark_remote: str, args: list[str], sentence: str
) -> None:
    no_java = {"PATH": str(Path(sys.executable).parent), "JAVA_HOME": ""}
    with socket_taken() as taken:
        filled = [a.format(free=free_port(), taken=taken) for a in args]
        if filled[0] == "tail" and "--remote" not in filled:
            filled += ["--remote", spark_remote]
        command = Command(*filled, env=no_java if "Java" in sentence else None)
        assert command.finish() == 1
    assert len(command.lines) == 1 and command.lines[0].startswith("spark-cdc: "), command.output
    assert sentence in command.lines[0]


class socket_taken:
    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def test_demo_runs_the_main_job(spark_remote: str, tmp_path: Path) -> None:
    demo = Command("demo", "--remote", spark_remote, "--seconds", "5", "--work-dir", str(tmp_path))
    assert demo.finish() == 0, demo.output
    text = demo.output
    for expected in ("commit 1 ", "update_preimage", "update_postimage", "delete", "Done:"):
        assert expected in text, text
    assert "Traceback" not in text


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

    from spark_cdc.cli.main import CliError, _parser, _token

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


def without(package: str, folder: Path) -> dict[str, str]:
    """An environment whose Python cannot import ``package``: a folder ahead of
    site-packages holds a module of that name that fails as a missing one does."""
    shadow = folder / package
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        f"raise ModuleNotFoundError(\"No module named '{package}'\", name='{package}')\n"
    )
    return {"PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}


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
