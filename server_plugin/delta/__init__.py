"""``delta_changelog``: the change feed of a Delta table, read from its transaction log."""
