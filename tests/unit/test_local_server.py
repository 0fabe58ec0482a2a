"""``start_local_server`` on a port taken between choosing it and the server binding it."""

from __future__ import annotations

import socket

import pytest
from pyspark.sql import SparkSession
from spark_cdc.testing import local_server

from tests.support import harness

pytestmark = pytest.mark.slow  # servers of its own


@pytest.mark.local_process
def test_a_chosen_port_taken_before_the_server_binds_it_is_chosen_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race CI met: the port was free when chosen, another process had it when the JVM
    bound it (java.net.BindException). The server starts on another port."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    held = taken.getsockname()[1]
    ports = iter([held])
    free = local_server.free_port
    monkeypatch.setattr(local_server, "free_port", lambda host: next(ports, 0) or free(host))
    # The race: the check found it free; only the JVM's bind meets the other process.
    monkeypatch.setattr(local_server, "port_is_free", lambda port, host: True)
    server = local_server.start_local_server(conf=harness.TEST_SERVER_CONF)
    try:
        assert server.port != held
        spark = SparkSession.builder.remote(server.url).create()
        assert spark.range(3).count() == 3
        spark.stop()
    finally:
        server.stop()
        taken.close()


def test_a_port_the_caller_named_is_not_replaced() -> None:
    """Only a port we chose is chosen again: a named one in use is refused by name."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(local_server.ServerStartError) as refused:
            local_server.start_local_server(port=port)
    assert refused.value.getCondition() == "SPARK_CDC_LOCAL_SERVER.PORT_IN_USE"
