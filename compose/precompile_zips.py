"""Add bytecode to the zips Spark puts on its Python workers' path (run once, in the image).

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on the path of
every Python process it starts, and Python keeps no bytecode for modules it imports from a
zip: each new daemon and worker compiles PySpark anew, CPython's zipimporter even twice
(``get_filename`` and ``get_code`` each compile). That was most of the half second each of a
stream's three Python daemons spends before its first fork on a 2-core machine
(docs/benchmarks.md). This writes an unchecked hash-based ``.pyc`` beside each ``.py`` of
each zip in the folder given, compiled by the Python that runs it (the image's, the
workers'): zipimport prefers it and unmarshals it. The sources stay, so tracebacks keep
their lines. The image never changes its zips, so the bytecode needs no check.

    python precompile_zips.py /opt/spark/python/lib
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
import zipfile
from importlib._bootstrap_external import _code_to_hash_pyc  # type: ignore[attr-defined]
from pathlib import Path


def precompile(archive: Path) -> int:
    """Rewrite ``archive`` with a ``.pyc`` beside each ``.py`` that has none; the count."""
    added = 0
    partial = archive.with_name(archive.name + ".partial")
    with zipfile.ZipFile(archive) as source, zipfile.ZipFile(partial, "w") as out:
        names = set(source.namelist())
        for info in source.infolist():
            data = source.read(info)
            out.writestr(info, data, compress_type=info.compress_type)
            if not info.filename.endswith(".py") or f"{info.filename}c" in names:
                continue
            # The name zipimport gives a module it compiles itself: tracebacks show it.
            code = compile(data, f"{archive}/{info.filename}", "exec", dont_inherit=True)
            pyc = _code_to_hash_pyc(code, importlib.util.source_hash(data), checked=False)
            entry = zipfile.ZipInfo(f"{info.filename}c", info.date_time)
            out.writestr(entry, bytes(pyc), compress_type=zipfile.ZIP_DEFLATED)
            added += 1
    os.replace(partial, archive)
    return added


def main(folder: str) -> None:
    warnings.simplefilter("ignore", SyntaxWarning)  # PySpark's own tests' literals
    for archive in sorted(Path(folder).glob("*.zip")):
        print(f"{archive}: {precompile(archive)} modules precompiled")


if __name__ == "__main__":
    main(*sys.argv[1:])
