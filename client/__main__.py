"""``python -m spark_cdc`` is ``spark-cdc``."""

from spark_cdc.cli import entry

entry()
