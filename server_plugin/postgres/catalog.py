"""What the source asks PostgreSQL's catalog: a table's columns, types and key, and its
replication slot and publication (made on request, ``createSlot``).

A table's key is its primary key, else its replica identity index: the columns a
transaction's changes of one row are folded by (``changes``). A user who is not a
superuser gets slots and publications from an administrator, who creates them as the
conditions SLOT_NOT_FOUND and PUBLICATION_NOT_FOUND say.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import StructField, StructType
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.postgres.connection import Session
from spark_cdc.server_plugin.postgres.types import PgType, spark_type

_COLUMNS = """
SELECT a.attname::text AS name, a.atttypmod AS modifier,
       COALESCE(e.typname, t.typname)::text AS type,
       COALESCE(e.typtype, t.typtype)::text AS category,
       (e.oid IS NOT NULL) AS is_array,
       COALESCE(a.attnum = ANY (k.indkey), false) AS key,
       c.relreplident::text AS identity, c.relpages::bigint AS pages
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type e ON t.typcategory = 'A' AND e.oid = t.typelem
LEFT JOIN LATERAL (
    SELECT i.indkey FROM pg_index i
    WHERE i.indrelid = c.oid AND (i.indisprimary OR i.indisreplident)
    ORDER BY i.indisprimary DESC LIMIT 1
) k ON true
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')
ORDER BY a.attnum
"""


@dataclass(frozen=True)
class TableInfo:
    qualified: str
    schema: StructType  # every column nullable: a delete carries only the key's values
    keys: tuple[str, ...]  # empty: no primary key or replica identity index
    replica_identity: str  # d(efault), n(othing), f(ull), i(ndex)
    pages: int
    # Per column: whether ADBC's binary copy reads it as its Spark type (``PgType``), so the
    # first copy selects it as it is, not as text.
    binary_exact: tuple[bool, ...] = ()

    @property
    def quoted(self) -> str:
        schema, _, table = self.qualified.partition(".")
        return f"{quote_ident(schema)}.{quote_ident(table)}"


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def table_info(session: Session, schema: str, table: str) -> TableInfo:
    rows = session.rows(_COLUMNS, f"describe {schema}.{table}", (schema, table))
    qualified = f"{schema}.{table}"
    if not rows:
        raise error("POSTGRES_CHANGELOG.TABLE_NOT_FOUND", table=qualified)
    types = [
        PgType(row["type"], int(row["modifier"]), row["category"], bool(row["is_array"]))
        for row in rows
    ]
    fields = [
        StructField(row["name"], spark_type(row["name"], qualified, pg), True)
        for row, pg in zip(rows, types, strict=True)
    ]
    return TableInfo(
        qualified,
        StructType(fields),
        tuple(row["name"] for row in rows if row["key"]),
        rows[0]["identity"],
        int(rows[0]["pages"]),
        tuple(pg.binary_exact for pg in types),
    )


def check_privileges(session: Session, infos: list[TableInfo], copies: bool) -> None:
    """Refused by name, before anything is read or made: a user without the REPLICATION
    attribute (reading a slot needs it, or superuser) and, when the read ``copies`` the
    tables, a table the user may not SELECT from (PostgreSQL's own refusals name neither
    the fix nor, for slots, the user)."""
    tables = ", ".join(
        f"({quote_literal(info.quoted)}, {quote_literal(info.qualified)})" for info in infos
    )
    row = session.rows(
        "SELECT current_user::text AS role, "
        "(SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user) AS ok, "
        f"(SELECT array_agg(name) FROM (VALUES {tables}) AS t(quoted, name) "
        "WHERE NOT has_table_privilege(quoted, 'SELECT'))::text[] AS unreadable",
        "check the user's privileges",
    )[0]
    if not row["ok"]:
        raise error("POSTGRES_CHANGELOG.REPLICATION_NOT_GRANTED", user=row["role"])
    if copies and row["unreadable"]:
        raise error(
            "POSTGRES_CHANGELOG.TABLE_NOT_READABLE", table=row["unreadable"][0], user=row["role"]
        )


def ensure_slot(
    session: Session, slot: str, publication: str, infos: list[TableInfo], create: bool
) -> None:
    """The slot (pgoutput) and the publication publishing the tables, made when missing if
    ``create``, else refused by name."""
    names = [info.qualified for info in infos]
    found = session.rows(
        "SELECT count(*) AS found FROM pg_publication WHERE pubname = $1",
        "look up the publication",
        (publication,),
    )[0]["found"]
    if not found:
        if not create:
            raise error(
                "POSTGRES_CHANGELOG.PUBLICATION_NOT_FOUND",
                publication=publication,
                table=", ".join(names),
            )
        session.execute(
            f"CREATE PUBLICATION {quote_ident(publication)} FOR TABLE "
            + ", ".join(info.quoted for info in infos),
            f"create publication {publication}",
        )
    else:
        listed = {
            row["name"]
            for row in session.rows(
                "SELECT schemaname::text || '.' || tablename::text AS name "
                "FROM pg_publication_tables WHERE pubname = $1",
                "list the publication's tables",
                (publication,),
            )
        }
        for name in names:
            if name not in listed:
                raise error(
                    "POSTGRES_CHANGELOG.TABLE_NOT_PUBLISHED", publication=publication, table=name
                )
    if slot_state(session, slot) is None:
        if not create:
            raise error("POSTGRES_CHANGELOG.SLOT_NOT_FOUND", slot=slot)
        session.rows(
            "SELECT slot_name::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
            f"create replication slot {slot}",
            (slot,),
        )


# A slot's columns of pg_replication_slots, as numbers: where its reader confirmed, and the
# WAL it keeps on the database's disk (from its restart point to now).
CONFIRMED_LSN = "(confirmed_flush_lsn - '0/0'::pg_lsn)::bigint"
RETAINED_WAL = "COALESCE((pg_current_wal_lsn() - restart_lsn)::bigint, 0)"


@dataclass(frozen=True)
class SlotState:
    """A slot's confirmed position, the database's newest one (LSNs as numbers) and the WAL
    the slot keeps on the database's disk, from its restart point to now."""

    confirmed: int
    current: int
    retained: int


def slot_state(session: Session, slot: str) -> SlotState | None:
    """``slot``'s state, None when there is no such slot."""
    rows = session.rows(
        f"SELECT {CONFIRMED_LSN} AS confirmed, "
        "(pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint AS current, "
        f"{RETAINED_WAL} AS retained "
        "FROM pg_replication_slots WHERE slot_name = $1",
        f"look up replication slot {slot}",
        (slot,),
    )
    return SlotState(**{k: int(v) for k, v in rows[0].items()}) if rows else None
