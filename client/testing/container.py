"""A Spark Connect server with this package on it, in a container, for integration tests.

    from spark_cdc.testing.container import SparkConnectContainer

    with SparkConnectContainer(shared=[tmp_dir]) as server:
        spark = SparkSession.builder.remote(server.url).create()

testcontainers has no Spark module (testcontainers-python issue #825), so this is one: the
image is built from this checkout's ``compose/Dockerfile`` (Spark from the ``pyspark`` wheel
at the client's version, the package with its ``server`` extra), the server is ready when it
logs that it started (Docker accepts connections on a published port at once, and a client
that connects too early backs off for up to a minute), the port is published on 127.0.0.1
only and a random token is required. Host folders in ``shared`` are mounted at the same path
and the server runs as the calling user, so both sides name tables by the same paths and the
client can read what the server writes.

Needs the ``container`` extra (testcontainers) and a Docker engine.
"""

from __future__ import annotations

import io
import os
import secrets
import sys
import tarfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyspark
from spark_cdc.server_plugin.conditions import ConditionError
from spark_cdc.testing import owners
from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer

READY_LINE = "Spark Connect server started"
CONTAINER_PORT = 15002
DEFAULT_BASE_IMAGE = "debian:bookworm-slim"
# Where the Dockerfile takes extra CA certificates from, inside the build context.
CA_CERTS_IN_CONTEXT = "compose/ca-certs"


class SparkConnectContainerError(ConditionError, RuntimeError):
    """The container could not be built or started; ``getCondition()`` says which."""


def source_checkout() -> Path | None:
    """The repository this package runs from, if it runs from one (an editable install or
    the checkout on ``sys.path``): the image is built from its ``compose/Dockerfile``."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "compose" / "Dockerfile").is_file() else None


class SparkConnectContainer(DockerContainer):
    """A Spark Connect server carrying ``delta_changelog`` (see the module docstring).

    ``spark_version`` defaults to the installed pyspark's (the server's Spark is then the
    client's); ``base_image`` and ``ca_certs`` default to ``$SPARK_CDC_BASE_IMAGE`` and
    ``$SPARK_CDC_CA_CERTS`` (a folder of PEM certificates trusted during the build only, for
    a TLS-intercepting proxy); ``conf`` adds Spark settings; ``shared_python_workers`` lets
    sessions and streams share Python workers and artifacts (as ``local_server``'s does);
    ``image`` runs a prebuilt image instead of building one (required when the package is
    installed from a wheel).
    """

    def __init__(
        self,
        *,
        spark_version: str | None = None,
        token: str | None = None,
        shared: Iterable[str | os.PathLike[str]] = (),
        shared_read_only: Iterable[str | os.PathLike[str]] = (),
        conf: Mapping[str, str] | None = None,
        base_image: str | None = None,
        ca_certs: str | os.PathLike[str] | None = None,
        image: str | None = None,
        driver_memory: str = "4g",
        startup_timeout: float = 240.0,
        shared_python_workers: bool = False,
    ) -> None:
        self.spark_version = spark_version or pyspark.__version__
        self.base_image = base_image or os.environ.get("SPARK_CDC_BASE_IMAGE") or DEFAULT_BASE_IMAGE
        certs = ca_certs or os.environ.get("SPARK_CDC_CA_CERTS")
        # A relative folder is the repository's, as for docker-compose.yml's build.
        root = source_checkout() or Path.cwd()
        self.ca_certs = root / certs if certs else None
        self.startup_timeout = startup_timeout
        self._token = token or secrets.token_urlsafe(24)
        self._build_image = image is None
        super().__init__(image or self.default_tag())
        self.with_env("SPARK_CONNECT_AUTHENTICATE_TOKEN", self._token)
        self.with_env("SPARK_DRIVER_MEMORY", driver_memory)
        if shared_python_workers:  # see spark_cdc.server_plugin.shared_workers_server
            self.with_env("SPARK_CDC_SHARED_PYTHON_WORKERS", "true")
        # Published on the loopback interface only, on a port Docker picks.
        # (docker-py's host binding; testcontainers types only a port number.)
        self.ports[f"{CONTAINER_PORT}/tcp"] = ("127.0.0.1",)  # type: ignore[assignment]
        for folder in shared:
            path = str(Path(folder).resolve())
            self.with_volume_mapping(path, path, "rw")
        for folder in shared_read_only:
            path = str(Path(folder).resolve())
            self.with_volume_mapping(path, path, "ro")
        args: list[str] = []
        for key, value in (conf or {}).items():
            args += ["--conf", f"{key}={value}"]
        if args:
            self.with_command(args)
        self._kwargs = {
            "user": f"{os.getuid()}:{os.getgid()}",
            "labels": {owners.LABEL: owners.owner_label()},
        }

    def __repr__(self) -> str:  # never the token
        return f"SparkConnectContainer(image={self.image!r})"

    def default_tag(self) -> str:
        python = f"{sys.version_info.major}.{sys.version_info.minor}"
        return f"spark-cdc-connect-server:spark{self.spark_version}-py{python}"

    @property
    def url(self) -> str:
        """``sc://localhost:PORT/;token=...``: the client sends a token without TLS only to
        host ``localhost``."""
        port = self.get_exposed_port(CONTAINER_PORT)
        return f"sc://localhost:{port}/;token={self._token}"

    @property
    def host_address(self) -> str:
        """This machine's address as the server in the container reaches it (the Docker
        bridge's gateway): where a service a test starts here must listen too."""
        wrapped = self.get_wrapped_container()
        wrapped.reload()
        return str(wrapped.attrs["NetworkSettings"]["Gateway"])

    def get_connection_url(self) -> str:
        return self.url

    def start(self) -> SparkConnectContainer:
        if self._build_image:
            self.build()
        _use_ryuk_only_if_present(self.get_docker_client().client)
        _remove_orphans(self.get_docker_client().client)
        super().start()
        self.wait_until_started()
        return self

    def restart(self) -> None:
        """Start the same container again (after ``kill()``): same port, same mounts."""
        container = self.get_wrapped_container()
        container.start()
        self.wait_until_started()

    def kill(self) -> None:
        """SIGKILL to the server (PID 1 in the container): no shutdown hook runs."""
        self.get_wrapped_container().kill(signal="SIGKILL")

    def wait_until_started(self) -> None:
        container = self.get_wrapped_container()
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            container.reload()
            if container.status == "exited":
                raise SparkConnectContainerError(
                    "SPARK_CDC_CONTAINER.SERVER_EXITED",
                    container=container.short_id,
                    log=_tail(container),
                )
            if container.status == "running" and _started(container):
                return
            time.sleep(0.5)
        raise SparkConnectContainerError(
            "SPARK_CDC_CONTAINER.START_TIMEOUT",
            readyLine=READY_LINE,
            timeout=f"{self.startup_timeout:.0f}",
            log=_tail(container),
        )

    def build(self) -> None:
        """Build (or find in Docker's cache) the image from the checkout's Dockerfile."""
        root = source_checkout()
        if root is None:
            raise SparkConnectContainerError("SPARK_CDC_CONTAINER.NO_SOURCE_CHECKOUT")
        import docker.errors

        client = self.get_docker_client().client
        try:
            client.images.build(
                fileobj=_build_context(root, self.ca_certs),
                custom_context=True,
                dockerfile="compose/Dockerfile",
                tag=self.image,
                buildargs={
                    "SPARK_CDC_BASE_IMAGE": self.base_image,
                    "SPARK_CDC_SPARK_VERSION": self.spark_version,
                    "SPARK_CDC_CA_CERTS": CA_CERTS_IN_CONTEXT,
                },
                rm=True,
                forcerm=True,
            )
        except docker.errors.BuildError as error:
            last = [
                str(chunk.get("stream") or chunk.get("error", "")).strip()
                for chunk in error.build_log
            ]
            detail = "\n".join(line for line in last if line)[-2000:]
            raise SparkConnectContainerError(
                "SPARK_CDC_CONTAINER.BUILD_FAILED", baseImage=self.base_image, log=detail
            ) from None


def _build_context(root: Path, ca_certs: Path | None) -> io.BytesIO:
    """The build context as a tar: the checkout's files that ``.dockerignore`` lets through,
    with ``ca_certs``'s certificates in ``compose/ca-certs`` (the folder may be anywhere;
    a Docker build sees only its context)."""
    from docker.utils.build import exclude_paths

    ignore = root / ".dockerignore"
    patterns = ignore.read_text().splitlines() if ignore.is_file() else []
    patterns = [p.strip() for p in patterns if p.strip() and not p.startswith("#")]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in sorted(exclude_paths(str(root), patterns, dockerfile="compose/Dockerfile")):
            tar.add(root / name, arcname=name, recursive=False)
        if ca_certs is not None:
            if not ca_certs.is_dir():
                raise SparkConnectContainerError(
                    "SPARK_CDC_CONTAINER.CA_CERTS_NOT_FOUND", folder=ca_certs
                )
            for cert in sorted([*ca_certs.glob("*.crt"), *ca_certs.glob("*.pem")]):
                tar.add(cert, arcname=f"{CA_CERTS_IN_CONTEXT}/{cert.name}")
    buffer.seek(0)
    return buffer


def _started(container: Any) -> bool:
    return READY_LINE.encode() in container.logs()


def _tail(container: Any, lines: int = 40) -> str:
    return container.logs(tail=lines).decode(errors="replace")


def _use_ryuk_only_if_present(client: Any) -> None:
    """testcontainers' reaper (Ryuk) is an image pulled from Docker Hub; where it cannot be
    (no registry, measured here) a start would fail, so it is turned off unless the user chose.
    Our containers carry an owner label instead, and the next start removes orphans."""
    if "TESTCONTAINERS_RYUK_DISABLED" in os.environ or testcontainers_config.ryuk_disabled:
        return
    import docker.errors

    try:
        client.images.get(testcontainers_config.ryuk_image)
        return
    except docker.errors.ImageNotFound:
        pass
    try:
        client.images.pull(testcontainers_config.ryuk_image)
    except docker.errors.APIError:
        testcontainers_config.ryuk_disabled = True


def _remove_orphans(client: Any) -> None:
    """Remove our containers whose owning process is gone (``owners``): a test run killed
    before its teardown must not leave a server running."""
    import docker.errors

    for container in client.containers.list(all=True, filters={"label": owners.LABEL}):
        if owners.owner_gone(container.labels.get(owners.LABEL, "")):
            try:
                container.remove(force=True)
            except docker.errors.APIError as error:
                # Another start (a second test worker) removes the same orphan at once: it
                # is gone (404) or being removed (409), which is what this wanted.
                if error.status_code not in (404, 409):
                    raise
