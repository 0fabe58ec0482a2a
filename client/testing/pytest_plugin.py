"""pytest fixtures for your own integration tests: a Spark Connect server with this package on
it, in a container (``spark_cdc.testing.container``), for the whole test session.

    def test_orders_feed(spark_cdc_session, spark_cdc_shared):
        path = str(spark_cdc_shared / "orders")      # write a Delta table here
        ...
        ChangelogReader(spark_cdc_session).option("rowId", "order_id").changes(path)

Installed with the package (a ``pytest11`` entry point); nothing starts unless a test asks
for a fixture. Set ``SPARK_CDC_BASE_IMAGE`` / ``SPARK_CDC_CA_CERTS`` where Docker Hub is out
of reach or a TLS proxy intercepts PyPI.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from spark_cdc.testing.container import SparkConnectContainer
    from spark_cdc.testing.postgres import PostgresServer


@pytest.fixture(scope="session")
def spark_cdc_shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A host folder the server sees at the same path: tables, checkpoints, outputs."""
    return tmp_path_factory.mktemp("spark-cdc-shared")


@pytest.fixture(scope="session")
def spark_cdc_server(spark_cdc_shared: Path) -> Iterator[SparkConnectContainer]:
    """The started container; ``.url`` is its ``sc://`` address with the token."""
    from spark_cdc.testing.container import SparkConnectContainer

    with SparkConnectContainer(shared=[spark_cdc_shared]) as server:
        yield server


@pytest.fixture(scope="session")
def spark_cdc_postgres(spark_cdc_server: SparkConnectContainer) -> Iterator[PostgresServer]:
    """A real PostgreSQL (logical decoding on) that the container's server reaches:
    ``.options()`` are the ``postgres`` source's connection options, ``.sql()`` runs SQL.
    Needs PostgreSQL's server binaries here (``apt-get install postgresql``)."""
    from spark_cdc.testing.postgres import start_postgres

    with start_postgres(spark_cdc_server.host_address) as server:
        yield server


@pytest.fixture(scope="session")
def spark_cdc_session(spark_cdc_server: SparkConnectContainer) -> Iterator[SparkSession]:
    """A Spark Connect session on the container's server."""
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(spark_cdc_server.url).create()
    yield session
    session.stop()
