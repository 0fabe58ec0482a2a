"""The compose files, read without a Docker engine. The image itself is built and run by the
harness wherever an engine answers (``tests/server/test_container.py``, and the whole suite)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
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
    # Healthy when the server says it started (a published port accepts at once).
    assert "Spark Connect server started" in service["healthcheck"]["test"]
    assert service["ports"], "the server's port must be published"
    for port in service["ports"]:
        assert str(port).startswith("127.0.0.1:"), f"{port} would listen on every interface"
    assert service["volumes"], "tables and checkpoints need a volume"


def test_token_comes_from_the_environment_and_is_required() -> None:
    token = _service()["environment"]["SPARK_CONNECT_AUTHENTICATE_TOKEN"]
    assert re.fullmatch(r"\$\{SPARK_CDC_TOKEN:\?[^}]+\}", token), token
    entrypoint = (COMPOSE / "entrypoint.sh").read_text()
    # The server reads it from its environment: on no command line, never echoed.
    assert "spark.connect.authenticate.token" not in entrypoint
    assert not re.search(r"echo[^\n]*\$\{?SPARK_CONNECT_AUTHENTICATE_TOKEN\b", entrypoint)
    assert "set -x" not in entrypoint


def test_image_builds_from_debian_with_the_tests_spark_and_no_baked_certificates() -> None:
    dockerfile = (COMPOSE / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (SPARK_CDC_\w+)=(\S+)$", dockerfile, re.MULTILINE))
    assert args["SPARK_CDC_BASE_IMAGE"] == "debian:bookworm-slim"
    assert args["SPARK_CDC_SPARK_VERSION"] == _default_spark() + ".*"
    assert args["SPARK_CDC_CA_CERTS"] == "compose/ca-certs"
    # The certificates are trusted in the build stage; the image is that stage's files only.
    stages = re.findall(r"^FROM (\S+)", dockerfile, re.MULTILINE)
    assert stages == ["${SPARK_CDC_BASE_IMAGE}", "scratch"]
    assert "COPY --from=build / /" in dockerfile
    build = _service()["build"]["args"]
    for name, default in args.items():
        assert build[name] == f"${{{name}:-{default}}}"


def test_the_image_receives_what_the_package_needs() -> None:
    dockerfile = (COMPOSE / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (.+) /src", dockerfile, re.MULTILINE))
    sources = {part for line in copied for part in line.split()}
    for needed in (
        "pyproject.toml",
        "pyspark_*.py",
        "client",
        "rewrite",
        "server_plugin",
    ):
        assert needed in sources


def test_the_container_stops_idle_daemons_after_the_local_servers_time() -> None:
    """One default for both servers this package runs (``idle_daemons.DEFAULT_IDLE_SECONDS``):
    the entry point's and the compose file's."""
    from spark_cdc.testing.idle_daemons import DEFAULT_IDLE_SECONDS

    default = f"${{SPARK_CDC_DAEMON_IDLE_SECONDS:-{DEFAULT_IDLE_SECONDS:g}}}"
    assert default in (COMPOSE / "entrypoint.sh").read_text()
    assert _service()["environment"]["SPARK_CDC_DAEMON_IDLE_SECONDS"] == default
