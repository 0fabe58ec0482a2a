"""compose/precompile_zips.py: bytecode beside the sources in the zips Spark puts first on
its Python workers' path, so a new worker imports PySpark without compiling it, and a
traceback through PySpark still shows its source lines."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyspark

ROOT = Path(__file__).resolve().parents[2]
LIB = Path(pyspark.__file__).parent / "python" / "lib"

# A fresh interpreter importing what a data source worker imports, from the zips alone,
# counting the modules zipimport compiles from source; then a traceback through PySpark.
_IMPORTS = """
import json, sys, traceback, zipimport
sys.path[:0] = [str(p) for p in sorted(__import__("pathlib").Path(sys.argv[1]).glob("*.zip"))]
compiled = []
compile_source = zipimport._compile_source
def counted(path, source):
    compiled.append(path)
    return compile_source(path, source)
zipimport._compile_source = counted
import pyspark.sql.datasource, pyspark.worker
from pyspark.sql.types import _parse_datatype_json_string
try:
    _parse_datatype_json_string("{")
except ValueError:
    shown = traceback.format_exc()
print(json.dumps({"compiled": len(compiled), "file": pyspark.__file__, "traceback": shown}))
"""


def _imported(folder: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTS, str(folder)], capture_output=True, text=True, check=True
    )
    return dict(json.loads(done.stdout))


def _precompile() -> object:
    spec = importlib.util.spec_from_file_location(
        "precompile_zips", ROOT / "compose" / "precompile_zips.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_worker_imports_pyspark_from_the_zip_without_compiling(tmp_path: Path) -> None:
    for archive in LIB.glob("*.zip"):
        shutil.copy(archive, tmp_path)
    before = _imported(tmp_path)
    assert int(str(before["compiled"])) > 100  # what every worker pays without the bytecode

    _precompile().main(str(tmp_path))  # type: ignore[attr-defined]

    after = _imported(tmp_path)
    assert after["compiled"] == 0
    assert after["file"] == f"{tmp_path}/pyspark.zip/pyspark/__init__.pyc"
    # The same traceback, source lines and all, as from the sources.
    assert after["traceback"] == before["traceback"]
    assert f'File "{tmp_path}/pyspark.zip/pyspark/sql/types.py"' in str(after["traceback"])
