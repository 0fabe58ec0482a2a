"""Tables made in the test module's PostgreSQL (the ``pg`` fixture, tests/conftest.py), each
published with a replication slot of its own."""

from __future__ import annotations

import itertools

from spark_cdc.testing.postgres import PostgresServer

_names = itertools.count()


def published_table(pg: PostgresServer, columns: str, full: bool = False) -> str:
    """A new table, published, with a slot (both named ``spark_cdc_public_<table>``, the
    source's defaults), and its name."""
    name = f"t{next(_names)}"
    pg.sql(f"CREATE TABLE {name} ({columns})")
    if full:
        pg.sql(f"ALTER TABLE {name} REPLICA IDENTITY FULL")
    pg.sql(f"CREATE PUBLICATION spark_cdc_public_{name} FOR TABLE {name}")
    pg.sql(f"SELECT pg_create_logical_replication_slot('spark_cdc_public_{name}', 'pgoutput')")
    return name
