"""What the figures were measured on: they mean little without it."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from spark_cdc.testing.local_server import find_java, java_major_version


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _package(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _commit() -> str | None:
    here = Path(__file__).parent
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True
    )
    return done.stdout.strip() or None


def describe_machine() -> dict[str, Any]:
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": _commit(),
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_gib": _memory_gib(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": java_major_version(find_java()),
        **{name: _package(name) for name in ("pyspark", "pyarrow", "deltalake", "pandas")},
    }
