"""``python -m spark_cdc`` is ``spark-cdc``."""

from spark_cdc.cli.main import entry

entry()
