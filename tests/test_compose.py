"""The compose files, checked without a Docker engine (none runs here or in CI); where an
engine runs, the whole suite runs against the stack itself (conftest)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "compose"


def _service() -> dict[str, Any]:
    spec = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
    return spec["services"]["spark-connect"]


def _default_spark() -> str:
    match = re.search(r"^DEFAULT_SPARK=(\S+)$", (ROOT / "dev").read_text(), re.MULTILINE)
    assert match
    return match.group(1)


def test_compose_file_has_a_healthcheck_and_a_loopback_port() -> None:
    service = _service()
    assert service["healthcheck"]["test"][0] == "CMD"
    assert "15002" in " ".join(service["healthcheck"]["test"])
    assert service["ports"], "the server's port must be published"
    for port in service["ports"]:
        assert str(port).startswith("127.0.0.1:"), f"{port} would listen on every interface"
    assert service["volumes"], "tables and checkpoints need a volume"


def test_token_comes_from_the_environment_and_is_required() -> None:
    token = _service()["environment"]["SPARK_CONNECT_TOKEN"]
    assert re.fullmatch(r"\$\{SPARK_CDC_TOKEN:\?[^}]+\}", token), token
    entrypoint = (COMPOSE / "entrypoint.sh").read_text()
    assert "spark.connect.authenticate.token=${SPARK_CONNECT_TOKEN}" in entrypoint
    assert "set -x" not in entrypoint and 'echo "${SPARK_CONNECT_TOKEN' not in entrypoint


def test_image_is_the_official_spark_one_at_the_tests_version() -> None:
    dockerfile = (COMPOSE / "Dockerfile").read_text()
    base = re.search(r"^ARG SPARK_IMAGE=(\S+)$", dockerfile, re.MULTILINE)
    assert base is not None
    image, tag = base.group(1).split(":")
    assert image == "apache/spark"
    assert tag.startswith(_default_spark() + ".") and "python3" in tag
    assert "SPARK_NO_DAEMONIZE=1" in dockerfile
    assert re.search(r"^ARG PYTHON_VERSION=3\.\d+$", dockerfile, re.MULTILINE)
    assert "--no-deps /src" in dockerfile  # this package, found by Spark as pyspark_*


def test_the_image_receives_what_the_package_needs() -> None:
    dockerfile = (COMPOSE / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (.+) /src", dockerfile, re.MULTILINE))
    sources = {part for line in copied for part in line.split()}
    for needed in (
        "pyproject.toml",
        "pyspark_delta_changelog.py",
        "client",
        "rewrite",
        "server_plugin",
    ):
        assert needed in sources
