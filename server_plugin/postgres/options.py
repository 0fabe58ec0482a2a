"""``postgres_changelog`` options: the common ones
(``spark_cdc.server_plugin.changefeed.source_options``; versions are commit LSNs), where the
database is (``host``, ``port``, ``database``, ``user``, ``passfile``, and libpq's own
``PG*`` variables in the server's environment), the tables (the path: ``schema.table``,
or several, comma-separated, served as one feed), the replication slot and publication it
reads, whether to make them (``createSlot``) and whether a stream starts with a first
copy of the table (``initialCopy``) and whether a ``TRUNCATE`` is served as a row
(``includeTruncates``) or refused.

No option takes a password: options are part of the query's plan, which ``explain()`` and
the server's log show. libpq reads ``PGPASSWORD`` or a password file on the server.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from spark_cdc.server_plugin import cdc_options
from spark_cdc.server_plugin.changefeed.source_options import (
    OptionSet,
    SourceOptions,
    parse_source_options,
    positive,
)
from spark_cdc.server_plugin.errors import error

SOURCE = "postgres_changelog"
CONNECTION_OPTIONS = ("host", "port", "database", "user", "passfile", "sslmode")
ACCEPTED = OptionSet(
    SOURCE,
    own=(
        *CONNECTION_OPTIONS,
        "slot",
        "publication",
        "createSlot",
        "initialCopy",
        "includeTruncates",
        "maxChangesPerTrigger",
    ),
    prefixes=(),
)
_CREDENTIAL = re.compile(r"pass(word)?$|secret|token|credential|access_key", re.IGNORECASE)
DEFAULT_MAX_CHANGES = 1_000_000  # per micro-batch, whole transactions (one may pass it)


@dataclass(frozen=True)
class PostgresOptions:
    common: SourceOptions
    connection: dict[str, str]  # libpq keywords
    tables: tuple[tuple[str, str], ...]  # (schema, table), in the path's order
    slot: str
    publication: str
    create_slot: bool
    initial_copy: bool
    include_truncates: bool
    max_changes: int

    @property
    def qualified(self) -> str:
        return ", ".join(f"{schema}.{table}" for schema, table in self.tables)


def looks_like_credential(key: str) -> bool:
    """Whether an option's name says it holds a credential (``passfile`` names a file)."""
    return bool(_CREDENTIAL.search(key)) and key.lower() != "passfile"


def refuse_secrets(keys: Iterable[str]) -> None:
    """``PASSWORD_IN_OPTIONS`` for an option that looks like a credential: the client
    checks before a plan holds it, the source again."""
    for key in keys:
        if looks_like_credential(key):
            raise error("POSTGRES_CHANGELOG.PASSWORD_IN_OPTIONS", option=key)


def connection_options(own: Mapping[str, str]) -> dict[str, str]:
    """The connection options among ``own`` (names as given, lower case), as libpq's
    keywords."""
    connection = {k: own[k] for k in CONNECTION_OPTIONS if own.get(k)}
    if "database" in connection:
        connection["dbname"] = connection.pop("database")
    return connection


def parse_postgres_options(raw: Mapping[str, str], streaming: bool = False) -> PostgresOptions:
    refuse_secrets(raw)
    common = parse_source_options(raw, ACCEPTED, streaming)
    own = common.own
    tables = tuple(_table(name) for name in common.path.split(",") if name.strip())
    if len(set(tables)) != len(tables):
        raise error("POSTGRES_CHANGELOG.TABLE_TWICE", path=common.path)
    connection = connection_options(own)
    default_name = _default_name(tables)
    return PostgresOptions(
        common=common,
        connection=connection,
        tables=tables,
        slot=own.get("slot", default_name),
        publication=own.get("publication", default_name),
        create_slot=cdc_options.boolean(own, "createSlot", False),
        initial_copy=cdc_options.boolean(own, "initialCopy", not common.has_start),
        include_truncates=cdc_options.boolean(own, "includeTruncates", False),
        max_changes=positive(own, "maxChangesPerTrigger") or DEFAULT_MAX_CHANGES,
    )


def _table(name: str) -> tuple[str, str]:
    schema, _, table = name.strip().rpartition(".")
    return schema or "public", table


def _default_name(tables: tuple[tuple[str, str], ...]) -> str:
    """``spark_cdc_<schema>_<table>`` for one table; for several, their count and a digest
    of their names (the same tables, in any order, give the same name)."""
    if len(tables) == 1:
        name = f"spark_cdc_{tables[0][0]}_{tables[0][1]}"
    else:
        names = ",".join(sorted(f"{s}.{t}" for s, t in tables))
        name = f"spark_cdc_{len(tables)}_tables_{hashlib.sha1(names.encode()).hexdigest()[:10]}"
    return re.sub(r"[^a-z0-9_]", "_", name.lower())[:63]
