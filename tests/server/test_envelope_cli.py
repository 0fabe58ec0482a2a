"""``spark-cdc`` on a folder of CDC envelope files (``--source-format maxwell-json`` and
the like), as an operator runs it against the harness's server: ``apply`` mirrors the table
the envelopes describe, and goes on from its checkpoint when more files land; ``tail``
shows each change; a stream without the table's columns is refused by name."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.apply_targets import read_table, sorted_rows
from tests.support.envelope_samples import LATER, SAMPLES, P
from tests.support.processes import Command

SCHEMA = "-oschema=id INT, name STRING, description STRING, weight DOUBLE"


def _finished(command: Command, code: int = 0) -> str:
    assert command.finish(300) == code, command.output
    assert "Traceback" not in command.output, command.output
    return command.output


def _table(ids: dict[int, tuple[str, str, float]]) -> list[dict[str, object]]:
    rows = [{"id": k, "name": n, "description": d, "weight": w} for k, (n, d, w) in ids.items()]
    return sorted(rows, key=lambda r: [(v is not None, str(v)) for v in r.values()])


def test_apply_mirrors_an_envelope_folder_and_goes_on_from_its_checkpoint(
    spark_remote: str, tmp_path: Path
) -> None:
    lines = (SAMPLES / "maxwell-data.txt").read_text().splitlines()
    folder = tmp_path / "topic"
    folder.mkdir()
    (folder / "part-1.json").write_text("\n".join(lines[:9]) + "\n")  # the first transaction
    target = str(tmp_path / "products")
    apply = [
        "apply", str(folder), "--source-format", "maxwell-json", SCHEMA,
        "--target", target, "--keys", "id", "--available-now", "--remote", spark_remote,
    ]  # fmt: skip
    _finished(Command(*apply))
    assert sorted_rows(read_table(target)) == _table({k: P[k] for k in range(101, 110)})
    (folder / "part-2.json").write_text("\n".join(lines[9:]) + "\n")
    _finished(Command(*apply))
    final = {**P, **LATER}
    assert sorted_rows(read_table(target)) == _table(
        {k: v for k, v in final.items() if k not in (102, 103, 111)}
    )


def test_tail_shows_each_change_of_an_envelope_folder(spark_remote: str, tmp_path: Path) -> None:
    folder = tmp_path / "topic"
    folder.mkdir()
    shutil.copy(SAMPLES / "ogg-data.txt", folder / "ogg-data.txt")
    tail = Command(
        "tail", str(folder), "--source-format", "ogg-json", SCHEMA, "--row-id", "id",
        "--remote", spark_remote,
    )  # fmt: skip
    try:
        tail.wait_for("new water resistent white wind breaker")
    finally:
        code = tail.interrupt()
    assert code == 0, tail.output
    assert "update_preimage" in tail.output and "update_postimage" in tail.output
    assert "Traceback" not in tail.output


def test_a_folder_without_the_tables_columns_is_refused_by_name(
    spark_remote: str, tmp_path: Path
) -> None:
    apply = Command(
        "apply", str(tmp_path), "--source-format", "canal-json", "--target",
        str(tmp_path / "t"), "--keys", "id", "--available-now", "--remote", spark_remote,
    )  # fmt: skip
    output = _finished(apply, code=1)
    assert "INVALID_CDC_ENVELOPE.SCHEMA_REQUIRED" in output, output
