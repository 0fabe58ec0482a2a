"""``iceberg_changelog``: the change feed of an Iceberg table, read from its snapshots with
pyiceberg and pyarrow (no Iceberg jars). Imports the root, ``row_level`` and
``changefeed``; never another format or a sink."""
