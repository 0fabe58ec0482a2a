"""``spark_cdc.testing``: Spark Connect servers for tests and local use.

``local_server`` starts one from the installed PySpark, ``container`` the compose image,
``pytest_plugin`` gives both to pytest as fixtures. It may import the user API and the
layers beneath; only ``spark_cdc.cli`` and tests import it.
"""
