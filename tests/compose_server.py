"""The compose stack as the test server, when a Docker engine is reachable.

Tables are written by the tests on the host, so the pytest temp folder is mounted into the
container at the same path, and the server runs as the host user to write checkpoints
there. The image's Python is built to the client's minor version (pickled code needs it).
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from spark_cdc.local_server import free_port

COMPOSE_DIR = Path(__file__).resolve().parent.parent / "compose"


@contextmanager
def compose_server(shared_dir: Path) -> Iterator[str]:
    from testcontainers.compose import DockerCompose

    token = secrets.token_urlsafe(24)
    port = free_port()
    os.environ.update(  # docker compose reads the file's variables from the environment
        SPARK_CDC_TOKEN=token,
        SPARK_CDC_PORT=str(port),
        SPARK_CDC_DATA=str(shared_dir),
        SPARK_CDC_DATA_IN_CONTAINER=str(shared_dir),
        SPARK_CDC_UID=str(os.getuid()),
        SPARK_CDC_GID=str(os.getgid()),
        SPARK_CDC_PYTHON=f"{sys.version_info.major}.{sys.version_info.minor}",
    )
    stack = DockerCompose(COMPOSE_DIR, compose_file_name="docker-compose.yml", build=True)
    stack.start()  # `up --wait`: returns once the healthcheck passes
    try:
        yield f"sc://localhost:{port}/;token={token}"
    finally:
        stack.stop()
