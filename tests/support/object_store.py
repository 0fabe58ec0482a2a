"""An S3 endpoint for the tests: moto's standalone server (``moto[server]``), a real S3 API
over HTTP that enforces conditional writes (``If-None-Match``, which delta-rs commits by).

It listens on 127.0.0.1, where a local Spark Connect server reaches it. A server in a
container reaches the host only through the Docker bridge's gateway address, so there moto
listens on that address instead: an interface only the host and its containers have.
The credentials are moto's throwaway ones, passed as storage options and catalog properties,
never on a command line.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

KEY_ID, SECRET, REGION = "testing", "testing", "us-east-1"


@dataclass(frozen=True)
class S3:
    endpoint: str

    def bucket(self) -> str:
        """A new, empty bucket."""
        import boto3

        name = f"spark-cdc-{uuid.uuid4().hex[:12]}"
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=KEY_ID,
            aws_secret_access_key=SECRET,
            region_name=REGION,
        )
        client.create_bucket(Bucket=name)
        return name

    @property
    def delta_options(self) -> dict[str, str]:
        """delta-rs' storage options (the readers' ``storage.<KEY>`` options too)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_REGION": REGION,
        }

    @property
    def iceberg_properties(self) -> dict[str, str]:
        """pyiceberg's FileIO properties (a region, else it asks AWS for the bucket's)."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": KEY_ID,
            "s3.secret-access-key": SECRET,
            "s3.region": REGION,
        }


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def docker_gateway() -> str:
    """The address the host has on Docker's default bridge network: its IPAM gateway, or
    (a daemon that records none, as Debian's docker 20.10 does) the first address of its
    subnet, which Docker gives the bridge."""
    found = subprocess.run(
        ["docker", "network", "inspect", "bridge", "-f", "{{json (index .IPAM.Config 0)}}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    config = json.loads(found.stdout)
    if config.get("Gateway"):
        return str(config["Gateway"])
    return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))


@contextmanager
def moto_server(host: str, log: Path) -> Iterator[S3]:
    """moto's server on ``host``, until the block ends."""
    program = shutil.which("moto_server", path=os.path.dirname(sys.executable))
    if program is None:
        raise RuntimeError("moto_server is not installed: pip install 'moto[server]'")
    port = _free_port(host)
    with log.open("w") as out:
        process = subprocess.Popen(
            [program, "-H", host, "-p", str(port)], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection((host, port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start: {log.read_text()}") from None
                time.sleep(0.1)
        yield S3(f"http://{host}:{port}")
    finally:
        process.terminate()
        process.wait(timeout=30)
