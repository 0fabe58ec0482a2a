"""``spark_cdc.compat``: what this package changes in PySpark's Connect client, and when.

The patches wait for the module they patch (``hooks``); server errors get our conditions
back (``server_errors``); listeners are removed without PySpark's deadlock
(``listener_bus``), and sessions closed without 4.0's and 4.1's (``release_pool``). It
may import ``spark_cdc.rewrite`` and ``spark_cdc.server_plugin``'s leaves, never the user
API above it, so the package root can arrange it at import.
"""
