"""``spark_cdc.cli``: the ``spark-cdc`` command line (``serve``, ``tail``, ``demo``).

It may import the user API (``spark_cdc``), ``spark_cdc.testing`` (the local server ``serve``
and ``demo`` start) and the layers beneath; nothing imports it but ``python -m spark_cdc``.
"""
