"""The source a command reads (``tail``, ``apply``, ``slots``): its format
(``--source-format``) and its own options (``-o KEY=VALUE``, as ``.option`` takes them),
such as a PostgreSQL source's host, database and slot, or an envelope folder's ``schema``
and ``mode`` (``decode_changes``' options).

A credential never goes on a command line, where every user of the machine reads it in
``ps``: an option that looks like one is refused by name, and the docs send the user to
the server's environment or a file it reads (``PGPASSWORD``, ``passfile``).
"""

from __future__ import annotations

import argparse

from spark_cdc.cli.lifecycle import CliError
from spark_cdc.server_plugin.postgres.options import looks_like_credential

# A folder of CDC envelope files (one JSON envelope a line), decoded by ``decode_changes``.
ENVELOPE_FORMATS = ("debezium-json", "maxwell-json", "canal-json", "ogg-json")
SOURCE_FORMATS = ("delta", "postgres", *ENVELOPE_FORMATS)


def with_source(sub: argparse.ArgumentParser, formats: bool = True) -> None:
    if formats:
        sub.add_argument(
            "--source-format",
            choices=SOURCE_FORMATS,
            default="delta",
            help="the source's format (default %(default)s); postgres: the source is "
            "schema.table, reached with -o host=… -o database=… (see docs/postgres-source.md); "
            "debezium-json, maxwell-json, canal-json, ogg-json: the source is a folder of "
            "envelope files, the table's columns given as -o schema='id INT, name STRING' "
            "(see docs/change-envelopes.md)",
        )
    sub.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the source, as .option(KEY, VALUE) takes it (repeatable); never "
        "a password: the server reads PGPASSWORD or a password file (-o passfile=PATH)",
    )


def source_options(args: argparse.Namespace) -> dict[str, str]:
    """``-o`` options as a dictionary, a malformed or credential-like one refused."""
    options: dict[str, str] = {}
    for given in args.option:
        key, equals, value = given.partition("=")
        key = key.strip()
        if not equals or not key:
            raise CliError("SPARK_CDC_CLI.INVALID_OPTION", option=given)
        if looks_like_credential(key):
            raise CliError("SPARK_CDC_CLI.CREDENTIAL_OPTION", option=key)
        options[key] = value
    return options
