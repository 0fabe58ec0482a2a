"""Spark 4.3's own CDC post-processing as a benchmark side: ``tests/bench/native``'s
minimal DSv2 changelog catalog, compiled against the installed pyspark, serving changelogs
written as Arrow IPC files (one per commit) to ``spark.read.changes`` and
``spark.readStream.changes``.

A benchmark that needs it declares ``server_conf = native_connector.server_conf``; its
tables live in ``<work>/native_changelogs/<name>`` (see ``write_changelog``).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

import pyarrow as pa
import pyspark
from pyspark.sql import SparkSession

CATALOG = "cdcbench"
CONNECTOR = Path(__file__).parent / "native" / "BenchChangelogCatalog.java"


def server_conf(work: Path) -> dict[str, str]:
    """The settings the server needs for the native sides (none when there is no JDK)."""
    jar = connector_jar(work)
    if jar is None:
        return {}
    return {
        "spark.driver.extraClassPath": str(jar),
        f"spark.sql.catalog.{CATALOG}": "spark_cdc_bench.BenchChangelogCatalog",
        f"spark.sql.catalog.{CATALOG}.root": str(work / "native_changelogs"),
    }


def connector_jar(work: Path) -> Path | None:
    """The native connector compiled against the installed pyspark's jars, once."""
    javac, jar_tool = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar_tool is None:
        return None
    source = CONNECTOR.read_bytes()
    jars = Path(pyspark.__file__).parent / "jars"
    stamp = hashlib.sha256(source + pyspark.__version__.encode()).hexdigest()[:16]
    jar = work / f"bench-changelog-{stamp}.jar"
    if jar.exists():
        return jar
    classes = Path(tempfile.mkdtemp(prefix="classes_", dir=work))
    try:
        compiled = subprocess.run(
            [javac, "-nowarn", "-d", str(classes), "-cp", f"{jars}/*", str(CONNECTOR)],
            capture_output=True,
            check=False,
        )
        if compiled.returncode != 0:  # a pyspark before 4.3 has no changelog API
            return None
        subprocess.run([jar_tool, "cf", str(jar), "-C", str(classes), "."], check=True)
    finally:
        shutil.rmtree(classes)
    return jar


def has_native_changelogs(spark: SparkSession) -> bool:
    major, minor = (int(p) for p in spark.version.split(".")[:2])
    if (major, minor) < (4, 3):
        return False
    return spark.conf.get(f"spark.sql.catalog.{CATALOG}", None) is not None


def changelog_folder(work: Path, name: str) -> Path:
    return work / "native_changelogs" / name


def write_changelog(
    folder: Path,
    commits: Iterable[tuple[int, pa.Table]],
    spark_schema_json: str,
    properties: Mapping[str, str | bool],
) -> None:
    """One table for the connector: each (version, rows) as ``v<version>.arrow``, the
    Spark schema, and what the changelog declares (rowId, rowVersion, the three flags)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for version, rows in commits:
        with pa.ipc.new_file(folder / f"v{version}.arrow", rows.schema) as writer:
            writer.write_table(rows, max_chunksize=4096)
    (folder / "schema.json").write_text(spark_schema_json)
    text = "".join(
        f"{key}={str(value).lower() if isinstance(value, bool) else value}\n"
        for key, value in properties.items()
    )
    (folder / "changelog.properties").write_text(text)


def table_name(name: str) -> str:
    return f"{CATALOG}.default.{name}"
