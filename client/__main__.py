"""``python -m spark_cdc`` is ``spark-cdc``."""

import sys

from spark_cdc.cli import main

sys.exit(main())
