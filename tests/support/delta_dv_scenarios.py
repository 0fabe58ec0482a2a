"""Deletion-vector histories written by hand (``DvTable``): DELETE, UPDATE and MERGE with
deletion vectors, inline and absolute-path ones, a partitioned table, a purge and a
whole-file remove, a RESTORE that shrinks a deletion vector."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.support.delta_dv_tables import DvTable
from tests.support.delta_tables import rows


def dml(table: DvTable) -> None:
    """DELETE, UPDATE, MERGE with deletion vectors; a DV growing over several commits."""
    file = next(iter(table.files))
    table.commit("DELETE", {file: [2, 3]})
    table.commit("UPDATE", {file: [5]}, new_data=rows([5], tag="u"))
    merged = rows([6, 7, 20, 21], tag="m")
    table.commit("MERGE", {file: [6, 7]}, new_data=merged)
    table.commit("DELETE", {file: [0]})


def inline_and_absolute(table: DvTable) -> None:
    file = next(iter(table.files))
    table.commit("DELETE", {file: [1]}, storage="i")
    table.commit("DELETE", {file: [4, 8]}, storage="p")
    table.commit("UPDATE", {file: [9]}, new_data=rows([9], tag="u"), storage="i")


def partitioned(table: DvTable) -> None:
    even, odd = table.file_where("part", "even"), table.file_where("part", "odd")
    table.commit("DELETE", {even: [0], odd: [1]})
    table.commit("UPDATE", {odd: [2]}, new_data=rows([5], tag="u"))


def purge_and_whole_file(table: DvTable) -> None:
    """DELETE, then OPTIMIZE purging the DV (dataChange=false), then DML on the new file
    and a DELETE of a whole file that had a DV."""
    file = next(iter(table.files))
    table.commit("DELETE", {file: [0, 1]})
    kept = [r["id"] for i, r in enumerate(table.file_rows(file)) if i not in (0, 1)]
    table.commit("OPTIMIZE", new_data=rows(kept), data_change=False, removes=[file])
    purged = next(iter(table.files))
    table.commit("DELETE", {purged: [0]})
    table.commit("DELETE", removes=[purged])


def restore_rows(table: DvTable) -> None:
    """A DV replaced by a smaller one (RESTORE): rows no longer marked come back."""
    file = next(iter(table.files))
    table.commit("DELETE", {file: [1, 2, 3]})
    table.commit("RESTORE", {file: [2]}, exact=True)


SCENARIOS: dict[str, tuple[Callable[[DvTable], None], bool]] = {
    "dml": (dml, False),
    "inline_and_absolute": (inline_and_absolute, False),
    "partitioned": (partitioned, True),
    "purge_and_whole_file": (purge_and_whole_file, False),
    "restore_rows": (restore_rows, False),
}


def dv_scenario(tmp_path: Path, name: str) -> str:
    """The table of scenario ``name`` written under ``tmp_path``; its path."""
    build, is_partitioned = SCENARIOS[name]
    path = str(tmp_path / name)
    table = DvTable(path, rows(range(10)), ["part"] if is_partitioned else None)
    build(table)
    return path
