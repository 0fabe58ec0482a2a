"""``delta_changelog``: the change feed of a Delta table, read from its transaction log.
Imports the root, ``row_level`` and ``changefeed``; never another format or a sink."""
