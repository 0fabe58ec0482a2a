"""``spark-cdc`` end to end, as a user runs it: real processes, a real server, real tables.
``serve``, the token and what every command checks before a server starts are in
tests/unit/test_cli_startup.py (no harness server)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession
from spark_cdc.testing.local_server import free_port

from tests.support.delta_tables import rows
from tests.support.processes import Command


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
        for i, gap in enumerate([12, 2]):
            time.sleep(gap)
            write_deltalake(path, rows([10 + i]), mode="append")
        tail.wait_for("commit 2 ", timeout=60)
        time.sleep(1)  # nothing more may come
    finally:
        assert tail.interrupt() == 0, tail.output
    heads = [line.split(" at ")[0] for line in tail.lines if line.startswith("commit ")]
    assert heads == ["commit 0", "commit 1", "commit 2"], tail.output


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


@pytest.mark.parametrize(("command", "flag"), [("tail", "--row-id"), ("apply", "--keys")])
def test_a_missing_key_column_is_named_with_the_flag_that_gave_it(
    spark_remote: str, tmp_path: Path, command: str, flag: str
) -> None:
    path = str(tmp_path / "orders")
    write_deltalake(path, rows(range(2)))
    extra = ["--target", str(tmp_path / "mirror")] if command == "apply" else []
    run = Command(command, path, flag, "order_id", *extra, "--remote", spark_remote)
    assert run.finish() == 1
    assert run.lines == [
        f"spark-cdc: [SPARK_CDC_CLI.UNKNOWN_COLUMN] {flag} names order_id, which the table "
        f"{path} does not have; its columns are: id, name, amount, part."
    ], run.output
    assert not (tmp_path / "mirror").exists()  # refused before anything was written


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


def test_version_with_remote_names_the_servers_spark(
    spark_remote: str, spark: SparkSession
) -> None:
    command = Command("--version", "--remote", spark_remote)
    assert command.finish() == 0, command.output
    ours, server = command.lines
    assert ours.startswith("spark-cdc ")
    assert server == f"server: Spark {spark.version}"


def test_demo_runs_the_main_job(spark_remote: str, tmp_path: Path) -> None:
    demo = Command("demo", "--remote", spark_remote, "--seconds", "5", "--work-dir", str(tmp_path))
    assert demo.finish() == 0, demo.output
    text = demo.output
    for expected in ("commit 1 ", "update_preimage", "update_postimage", "delete", "Done:"):
        assert expected in text, text
    # The snapshot step: snapshot 2 closes the refunded order's and the deleted one's
    # versions and opens the refunded one's and the new one's.
    assert re.search(r"snapshot 1: \d+ changes", text), text
    assert "snapshot 2: 3 changes, 4 rows written" in text, text
    assert "Traceback" not in text
